package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/queue"
)

// show and list name the key of an encrypted payload instead of printing
// its ciphertext.
func TestShowEncryptedPayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	kr, err := queue.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{1}, queue.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	id, err := queue.New(b.pool, queue.WithEncryption(kr)).Enqueue(context.Background(), "charge", map[string]string{"card": "4111"})
	if err != nil {
		t.Fatal(err)
	}
	human := b.run(t, "show", fmt.Sprint(id.ID)).ok(t).stdout
	if !strings.Contains(human, "  Payload:   encrypted (key k1)\n") || strings.Contains(human, "skiplock_encrypted") {
		t.Fatalf("show does not name the key:\n%s", human)
	}
	var shown struct {
		PayloadKeyID string `json:"payload_key_id"`
	}
	b.run(t, "show", fmt.Sprint(id.ID), "--json").ok(t).decode(t, &shown)
	if shown.PayloadKeyID != "k1" {
		t.Fatalf("show --json payload_key_id = %q; want k1", shown.PayloadKeyID)
	}
	if out := b.run(t, "list", "--json").ok(t).stdout; !strings.Contains(out, `"payload_key_id": "k1"`) && !strings.Contains(out, `"payload_key_id":"k1"`) {
		t.Fatalf("list --json lacks the key ID:\n%s", out)
	}
}
