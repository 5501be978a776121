package schema

import (
	"encoding/json"
	"fmt"
)

// EncodePayload turns a payload into the JSON stored in the task: []byte and
// json.RawMessage must already be valid JSON; nil is JSON null; anything else
// goes through json.Marshal. The worker encodes a task's output the same way.
func EncodePayload(payload any) (json.RawMessage, error) {
	var raw []byte
	switch v := payload.(type) {
	case nil:
		return json.RawMessage("null"), nil
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("payload cannot be encoded as JSON: %w", err)
		}
		return b, nil
	}
	if raw == nil {
		return json.RawMessage("null"), nil
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("payload is not valid JSON: %.60q", raw)
	}
	return raw, nil
}
