package schema

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/migrations"
)

func TestChannels(t *testing.T) {
	work, control := Channels("app")
	if work != "skiplock_app" || control != "skiplock_ctl_app" {
		t.Fatalf("Channels(app) = %q, %q", work, control)
	}
	// PostgreSQL cuts identifiers at 63 bytes: so must LISTEN and NOTIFY's
	// callers, or they would name different channels.
	long := strings.Repeat("s", 63)
	work, control = Channels(long)
	if len(work) != 63 || len(control) != 63 || !strings.HasPrefix(control, "skiplock_ctl_s") {
		t.Fatalf("Channels(63 bytes) = %q, %q", work, control)
	}
}

func TestEncodePayload(t *testing.T) {
	for _, c := range []struct {
		in   any
		want string
	}{
		{nil, "null"},
		{json.RawMessage(nil), "null"},
		{[]byte(`{"a":1}`), `{"a":1}`},
		{json.RawMessage(`[1, 2]`), `[1, 2]`},
		{map[string]int{"a": 1}, `{"a":1}`},
	} {
		got, err := EncodePayload(c.in)
		if err != nil || string(got) != c.want {
			t.Errorf("EncodePayload(%#v) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	if _, err := EncodePayload([]byte("{")); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("invalid JSON: %v", err)
	}
	if _, err := EncodePayload(make(chan int)); err == nil || !strings.Contains(err.Error(), "cannot be encoded") {
		t.Errorf("unencodable: %v", err)
	}
}

func TestCheck(t *testing.T) {
	if err := Check(Info{Name: "app", Version: migrations.Latest}); err != nil {
		t.Fatalf("latest: %v", err)
	}
	for _, info := range []Info{
		{Name: "app", Version: migrations.Latest, Dirty: true},
		{Name: "app"},
		{Name: "app", Version: migrations.Latest - 1},
	} {
		if err := Check(info); !errors.Is(err, pgerr.ErrNotMigrated) {
			t.Errorf("Check(%+v) = %v, want ErrNotMigrated", info, err)
		}
	}
}
