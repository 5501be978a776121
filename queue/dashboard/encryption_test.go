package dashboard_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
)

// The task page and the task lists name the key of an encrypted payload
// instead of showing its ciphertext.
func TestEncryptedPayloadShown(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Options{})
	kr, err := queue.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{1}, queue.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	id, err := queue.New(b.pool, queue.WithEncryption(kr)).Enqueue(context.Background(), "charge", map[string]string{"card": "4111"})
	if err != nil {
		t.Fatal(err)
	}
	code, body := get(t, http.DefaultClient, fmt.Sprintf("%s/tasks/%d", b.url, id.ID))
	if code != http.StatusOK || !strings.Contains(body, `<p class="payload" id="payload">encrypted (key k1)`) || strings.Contains(body, "skiplock_encrypted") {
		t.Fatalf("GET /tasks/%d: %d\n%s", id.ID, code, body)
	}
	code, body = get(t, http.DefaultClient, b.url+"/tasks")
	if code != http.StatusOK || !strings.Contains(body, `<code>encrypted (key k1)</code>`) || strings.Contains(body, "skiplock_encrypted") {
		t.Fatalf("GET /tasks: %d\n%s", code, body)
	}
}
