package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/worker"
)

func encryptionKey(b byte) []byte { return bytes.Repeat([]byte{b}, queue.KeySize) }

func keyring(t *testing.T, current string, ids ...string) *queue.Keyring {
	t.Helper()
	keys := map[string][]byte{}
	for _, id := range ids {
		keys[id] = encryptionKey(id[len(id)-1])
	}
	kr, err := queue.NewKeyring(current, keys)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

type card struct {
	Number string `json:"number"`
}

// recorder is a handler that keeps the decoded payloads it ran with.
type recorder struct {
	mu   sync.Mutex
	seen map[int64]string
}

func (r *recorder) handle(ctx context.Context, task *worker.Task) error {
	var c card
	if err := task.Decode(&c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[int64]string{}
	}
	r.seen[task.ID] = c.Number
	return nil
}

func (r *recorder) get(id int64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[id]
}

func TestEncryptRoundTripAndRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	// Enqueued under k1, then under k2 after rotation.
	old := queue.New(b.pool, queue.WithEncryption(keyring(t, "k1", "k1")))
	rotated := keyring(t, "k2", "k1", "k2")
	current := queue.New(b.pool, queue.WithEncryption(rotated))
	id1, err := old.Enqueue(ctx, "charge", card{"4111-one"})
	if err != nil {
		t.Fatal(err)
	}
	id2, err := current.Enqueue(ctx, "charge", card{"4111-two"})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int64]string{id1.ID: "k1", id2.ID: "k2"} {
		if kid, _ := queue.EncryptedKeyID(b.get(t, id).Payload); kid != want {
			t.Errorf("task %d: key %q; want %q", id, kid, want)
		}
	}
	if n := b.count(t, "payload::text LIKE '%4111%'"); n != 0 {
		t.Fatalf("%d stored payloads hold the plaintext", n)
	}

	var rec recorder
	start(t, b.pool, worker.Config{Keyring: rotated}, worker.Handlers{"charge": rec.handle})
	waitFor(t, 2*time.Second, "both tasks completed", func() bool {
		return b.count(t, "status = 'completed'") == 2
	})
	if got1, got2 := rec.get(id1.ID), rec.get(id2.ID); got1 != "4111-one" || got2 != "4111-two" {
		t.Errorf("handler saw %q and %q; want the plaintexts", got1, got2)
	}
}

func TestEncryptUnknownKeyFailsThenRunsAfterRequeue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	client := queue.New(b.pool, queue.WithEncryption(keyring(t, "k1", "k1")))
	lacking, err := client.Enqueue(ctx, "charge", card{"4111-secret"}, queue.WithMaxAttempts(5))
	if err != nil {
		t.Fatal(err)
	}
	none, err := client.Enqueue(ctx, "charge", card{"4111-secret"}, queue.WithQueue("plain"), queue.WithMaxAttempts(5))
	if err != nil {
		t.Fatal(err)
	}

	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var rec recorder
	handlers := worker.Handlers{"charge": rec.handle}
	// One worker's keyring lacks k1; the other has none at all.
	_, stop1 := start(t, b.pool, worker.Config{Keyring: keyring(t, "k2", "k2"), Logger: logger}, handlers)
	_, stop2 := start(t, b.pool, worker.Config{Queues: []string{"plain"}, Logger: logger}, handlers)
	waitFor(t, 2*time.Second, "both tasks failed", func() bool {
		return b.count(t, "status = 'failed'") == 2
	})
	stop1()
	stop2()
	for _, id := range []int64{lacking.ID, none.ID} {
		task := b.get(t, id)
		if task.Attempt != 1 || len(task.Errors) != 1 {
			t.Fatalf("task %d: attempt %d, %d errors; want one permanent failure", id, task.Attempt, len(task.Errors))
		}
		e := task.Errors[0]
		if !e.Permanent || !strings.Contains(e.Error, `payload encrypted with key "k1", which this worker's keyring does not have`) {
			t.Errorf("task %d: error %+v; want a permanent failure naming key k1", id, e)
		}
	}
	if rec.get(lacking.ID) != "" || rec.get(none.ID) != "" {
		t.Error("the handler ran without the plaintext's key")
	}
	if l := logs.String(); strings.Contains(l, "4111") || strings.Contains(l, string(encryptionKey('1'))) {
		t.Errorf("the log holds plaintext or key material:\n%s", l)
	}

	// The key is added: requeued, both run.
	if _, err := client.Requeue(ctx, queue.RequeueRequest{Filter: queue.Filter{IDs: []int64{lacking.ID, none.ID}}}); err != nil {
		t.Fatal(err)
	}
	start(t, b.pool, worker.Config{Queues: []string{queue.DefaultQueue, "plain"}, Keyring: keyring(t, "k2", "k1", "k2")}, handlers)
	waitFor(t, 2*time.Second, "both tasks completed after requeue", func() bool {
		return b.count(t, "status = 'completed'") == 2
	})
	if rec.get(lacking.ID) != "4111-secret" || rec.get(none.ID) != "4111-secret" {
		t.Error("the handler did not see the plaintext after requeue")
	}
}

func TestEncryptTamperingDetected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	kr := keyring(t, "k1", "k1")
	client := queue.New(b.pool, queue.WithEncryption(kr))
	enqueue := func(name string) int64 {
		t.Helper()
		id, err := client.Enqueue(ctx, name, card{"4111-secret"}, queue.WithMaxAttempts(5))
		if err != nil {
			t.Fatal(err)
		}
		return id.ID
	}
	altered, refund, moved := enqueue("charge"), enqueue("refund"), enqueue("charge")
	// One ciphertext altered; another moved under a task of another name.
	if _, err := b.pool.Exec(ctx, `UPDATE skiplock_tasks SET payload = jsonb_set(payload, '{skiplock_encrypted,data}', to_jsonb(encode('forged ciphertext', 'base64'))) WHERE id = $1`, altered); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE skiplock_tasks SET payload = (SELECT payload FROM skiplock_tasks WHERE id = $1) WHERE id = $2`, moved, refund); err != nil {
		t.Fatal(err)
	}
	var rec recorder
	start(t, b.pool, worker.Config{Keyring: kr}, worker.Handlers{"charge": rec.handle, "refund": rec.handle})
	waitFor(t, 2*time.Second, "every task finished", func() bool {
		return b.count(t, "status IN ('completed', 'failed')") == 3
	})
	for _, id := range []int64{altered, refund} {
		task := b.get(t, id)
		if task.Status != queue.StatusFailed || len(task.Errors) != 1 || !task.Errors[0].Permanent ||
			!strings.Contains(task.Errors[0].Error, `payload encrypted with key "k1" fails authentication for task name "`+task.Name+`"`) {
			t.Errorf("task %d (%s): %s, %+v; want a permanent authentication failure", id, task.Name, task.Status, task.Errors)
		}
	}
	if task := b.get(t, moved); task.Status != queue.StatusCompleted || rec.get(moved) != "4111-secret" {
		t.Errorf("untouched task: %s, handler saw %q", task.Status, rec.get(moved))
	}
}
