package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/connstr"
)

var defaultClient struct {
	once   sync.Once
	client *Client
	err    error
}

// Default returns the package-level client, built on first use from the
// DATABASE_URL environment variable, as http.Get uses http.DefaultClient.
func Default() (*Client, error) {
	defaultClient.once.Do(func() {
		url := os.Getenv("DATABASE_URL")
		if url == "" {
			defaultClient.err = errors.New("opening the default client: DATABASE_URL is not set (export DATABASE_URL=postgres://user@host:5432/dbname)")
			return
		}
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			defaultClient.err = connstr.Error(fmt.Errorf("opening the default client: DATABASE_URL: %w", err), connstr.Passwords(url)...)
			return
		}
		defaultClient.client = New(pool)
	})
	return defaultClient.client, defaultClient.err
}

// Enqueue inserts a task through the default client; see Client.Enqueue.
func Enqueue(ctx context.Context, name string, payload any, opts ...Option) (int64, error) {
	c, err := Default()
	if err != nil {
		return 0, err
	}
	return c.Enqueue(ctx, name, payload, opts...)
}

// EnqueueTx inserts a task within tx; see Client.EnqueueTx. It uses the
// default client when DATABASE_URL is set, and needs no DATABASE_URL
// otherwise: tx is the connection.
func EnqueueTx(ctx context.Context, tx Executor, name string, payload any, opts ...Option) (int64, error) {
	c, err := Default()
	if err != nil {
		if os.Getenv("DATABASE_URL") != "" {
			return 0, err // set but unusable: say so rather than guess
		}
		c = txClient()
	}
	return c.EnqueueTx(ctx, tx, name, payload, opts...)
}

// txClient is the client of EnqueueTx without DATABASE_URL: it has no pool,
// so it only inserts through the transactions it is handed.
var txClient = sync.OnceValue(func() *Client { return New(nil) })
