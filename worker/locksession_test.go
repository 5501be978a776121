package worker

import (
	"encoding/json"
	"testing"
)

// The lock session's jsonb codec copies what PostgreSQL sends into a
// json.RawMessage, and still decodes into anything else.
func TestUnmarshalRaw(t *testing.T) {
	src := []byte(`{"a": [1, 2]}`)
	var raw json.RawMessage
	if err := unmarshalRaw(src, &raw); err != nil || string(raw) != `{"a": [1, 2]}` {
		t.Fatalf("raw = %s, %v", raw, err)
	}
	src[2] = 'b'
	if string(raw) != `{"a": [1, 2]}` {
		t.Fatalf("raw shares the source's memory: %s", raw)
	}
	var m map[string][]int
	if err := unmarshalRaw([]byte(`{"a": [1, 2]}`), &m); err != nil || len(m["a"]) != 2 {
		t.Fatalf("m = %v, %v", m, err)
	}
}
