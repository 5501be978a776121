package queue_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// A Client with a keyring encrypts every payload it enqueues; the table
// holds an envelope naming the key, and workers given the same keyring
// (worker.Config.Keyring) see the plaintext.
func ExampleWithEncryption() {
	ctx := context.Background()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()

	// Keys come from a secret store in practice: 32 bytes each.
	keys := map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)}
	kr, err := queue.NewKeyring("k1", keys)
	if err != nil {
		panic(err)
	}
	q := queue.New(pool, queue.WithEncryption(kr))

	id, _ := q.Enqueue(ctx, "charge", map[string]string{"card": "4111 1111 1111 1111"})
	task, _ := q.Get(ctx, id.ID)
	kid, encrypted := queue.EncryptedKeyID(task.Payload)
	fmt.Println("encrypted:", encrypted, "key:", kid)
	fmt.Println("plaintext stored:", bytes.Contains(task.Payload, []byte("4111")))

	plain, _ := kr.Decrypt(task.Name, task.Payload)
	fmt.Println(string(plain))
	// Output:
	// encrypted: true key: k1
	// plaintext stored: false
	// {"card":"4111 1111 1111 1111"}
}
