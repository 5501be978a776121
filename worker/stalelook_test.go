package worker

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/db"
)

// The look for stale lock sessions runs on the rescuer's goroutine and in
// every election's tries at once; when the database goes away, all of
// them record the outage in the one log-once state. Under -race this
// failed when that state was made on first use (a worker of a shard whose
// server crashed exited with a data race), and the outage must still be
// logged once, not once per look.
func TestStaleLookConcurrentOutage(t *testing.T) {
	// A port nothing listens on: every look fails to connect.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@"+addr+"/none?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cfg, err := Config{WorkerID: "stale-look", Logger: log, StaleAfter: 30 * time.Second}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(guardDeps{pool: pool, queries: db.New(), cfg: cfg, log: log}).(*advisoryGuard)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 5 {
				if i%2 == 0 {
					g.beforeRescue(ctx)
				} else {
					g.endStaleSessions(ctx, g.leaderKey(uint32(i)))
				}
			}
		})
	}
	wg.Wait()

	if n := strings.Count(logs.String(), "looking for lock sessions of workers whose heartbeat is stale"); n != 1 {
		t.Fatalf("the outage was logged %d times, want once:\n%s", n, logs.String())
	}
}
