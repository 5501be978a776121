package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, queue.KeySize) }

func TestKeyringInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		current string
		keys    map[string][]byte
		want    string
	}{
		{"short key", "k1", map[string][]byte{"k1": make([]byte, 16)}, `key "k1" is 16 bytes; AES-256 needs 32`},
		{"unknown current", "k2", map[string][]byte{"k1": testKey(1)}, `current key "k2" is not one of its keys`},
		{"no keys", "k1", nil, `current key "k1" is not one of its keys`},
		{"empty ID", "k1", map[string][]byte{"k1": testKey(1), "": testKey(2)}, "empty key ID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kr, err := queue.NewKeyring(tc.current, tc.keys)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewKeyring = %v, %v; want an error containing %q", kr, err, tc.want)
			}
			if strings.Contains(err.Error(), "\x01") {
				t.Errorf("error quotes key material: %q", err)
			}
		})
	}
}

func TestKeyringEncrypt(t *testing.T) {
	t.Parallel()
	kr, err := queue.NewKeyring("k1", map[string][]byte{"k1": testKey(1)})
	if err != nil {
		t.Fatal(err)
	}
	plain := json.RawMessage(`{"card":"4111"}`)
	a, err := kr.Encrypt("charge", plain)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := kr.Encrypt("charge", plain)
	if bytes.Equal(a, b) {
		t.Error("two encryptions of one payload are equal: the nonce is not random")
	}
	if bytes.Contains(a, []byte("4111")) {
		t.Errorf("envelope holds the plaintext: %s", a)
	}
	if kid, ok := queue.EncryptedKeyID(a); !ok || kid != "k1" {
		t.Errorf("EncryptedKeyID = %q, %v; want k1, true", kid, ok)
	}
	if kid, ok := queue.EncryptedKeyID(plain); ok {
		t.Errorf("EncryptedKeyID of a plain payload = %q, true", kid)
	}
	got, err := kr.Decrypt("charge", a)
	if err != nil || string(got) != string(plain) {
		t.Fatalf("Decrypt = %s, %v; want %s", got, err, plain)
	}
	// Bound to the name: the envelope does not open for another task.
	if _, err := kr.Decrypt("refund", a); !errors.Is(err, queue.ErrDecrypt) {
		t.Errorf("Decrypt under another name: %v; want ErrDecrypt", err)
	}
	// A plain payload passes through, with or without a keyring.
	var none *queue.Keyring
	if got, err := none.Decrypt("charge", plain); err != nil || string(got) != string(plain) {
		t.Errorf("nil keyring, plain payload: %s, %v", got, err)
	}
	if _, err := none.Decrypt("charge", a); !errors.Is(err, queue.ErrUnknownKey) ||
		!strings.Contains(err.Error(), `payload encrypted with key "k1", which this worker's keyring does not have`) {
		t.Errorf("nil keyring, encrypted payload: %v", err)
	}
	// A malformed envelope is an error, not a payload.
	if _, err := kr.Decrypt("charge", json.RawMessage(`{"skiplock_encrypted":{"kid":"k1","nonce":"!","data":""}}`)); !errors.Is(err, queue.ErrDecrypt) {
		t.Errorf("malformed envelope: %v; want ErrDecrypt", err)
	}
}

type chargeArgs struct {
	Card string `json:"card"`
}

func (chargeArgs) TaskName() string { return "charge" }

// Every enqueue path encrypts, and the table never holds the plaintext.
func TestEncryptEveryEnqueuePath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t, pgtest.Schema(t, true))
	kr, err := queue.NewKeyring("k1", map[string][]byte{"k1": testKey(1)})
	if err != nil {
		t.Fatal(err)
	}
	q := queue.New(pool, queue.WithEncryption(kr))
	secret := map[string]string{"card": "4111-secret"}

	var ids []int64
	add := func(res queue.EnqueueResult, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	add(q.Enqueue(ctx, "charge", secret))
	add(q.Enqueue(ctx, "charge", secret, queue.WithUnique())) // derived from the plaintext
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	add(q.EnqueueTx(ctx, tx, "charge", secret))
	many, err := q.EnqueueManyTx(ctx, tx, []queue.NewTask{{Name: "charge", Payload: secret}, {Name: "charge", Payload: secret}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range many {
		ids = append(ids, r.ID)
	}
	many, err = q.EnqueueMany(ctx, []queue.NewTask{{Name: "charge", Payload: secret}, {Name: "charge", Payload: secret}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range many {
		ids = append(ids, r.ID)
	}
	add(q.EnqueueArgs(ctx, chargeArgs{Card: "4111-secret"}))
	add(q.EnqueueArgs(ctx, chargeArgs{Card: "4111-secret"}, queue.WithDependsOn(ids[0])))
	wf, err := q.EnqueueWorkflow(ctx, queue.Workflow{Name: "checkout", Steps: []queue.Step{
		{Name: "charge", Payload: secret},
		{Name: "receipt", Payload: secret, DependsOn: []string{"charge"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range wf.TaskIDs {
		ids = append(ids, id)
	}

	var leaked, total int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE payload::text LIKE '%4111%'), count(*) FROM skiplock_tasks`).Scan(&leaked, &total); err != nil {
		t.Fatal(err)
	}
	if leaked != 0 || total != len(ids) {
		t.Fatalf("%d of %d stored payloads hold the plaintext; want 0 of %d", leaked, total, len(ids))
	}
	for _, id := range ids {
		task, err := q.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if kid, ok := queue.EncryptedKeyID(task.Payload); !ok || kid != "k1" {
			t.Errorf("task %d (%s): EncryptedKeyID = %q, %v; want k1", id, task.Name, kid, ok)
		}
		plain, err := kr.Decrypt(task.Name, task.Payload)
		if err != nil || !strings.Contains(string(plain), "4111-secret") {
			t.Errorf("task %d: Decrypt = %s, %v", id, plain, err)
		}
	}
	// WithUnique's key is derived from the plaintext: a second enqueue of
	// the same payload is a duplicate although its ciphertext differs.
	if res, err := q.Enqueue(ctx, "charge", secret, queue.WithUnique()); err != nil || !res.Duplicate || res.ID != ids[1] {
		t.Errorf("second unique enqueue: %+v, %v; want a duplicate of %d", res, err, ids[1])
	}
}
