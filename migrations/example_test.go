package migrations_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
)

// Up migrates the first schema of the pool's search_path; until then,
// producers and workers get ErrNotMigrated.
func ExampleUp() {
	tb, done := pgtest.ExampleTB()
	defer done()
	pool := pgtest.NewPool(tb, pgtest.Schema(tb, false)) // an empty schema
	ctx := context.Background()

	_, err := queue.New(pool).Enqueue(ctx, "email.send", map[string]string{"to": "ada@example.com"})
	fmt.Println("before Up:", errors.Is(err, migrations.ErrNotMigrated))

	if err := migrations.Up(ctx, pool); err != nil {
		panic(err)
	}
	version, dirty, err := migrations.Version(ctx, pool)
	fmt.Println("after Up, at the latest version:", version == migrations.Latest, dirty, err)
	_, err = queue.New(pool).Enqueue(ctx, "email.send", map[string]string{"to": "ada@example.com"})
	fmt.Println("enqueued:", err == nil)
	// Output:
	// before Up: true
	// after Up, at the latest version: true false <nil>
	// enqueued: true
}
