package pgtest

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

// A PgBouncer that dies (as PgBouncer 1.x can, aborting on "bad client
// state") comes back on the same URL, as under a service manager.
func TestPgBouncerRestartsAfterCrash(t *testing.T) {
	b := StartPgBouncer(t, Server(t).URL, "")
	b.mu.Lock()
	b.cmd.Process.Signal(syscall.SIGKILL)
	b.mu.Unlock()

	var last error
	Eventually(t, Patient(10*time.Second), "a connection through the restarted pgbouncer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, b.URL)
		if err != nil {
			last = err
			return false
		}
		defer conn.Close(ctx)
		var one int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			last = err
			return false
		}
		return b.Restarts() == 1
	})
	if got := b.Restarts(); got != 1 {
		t.Fatalf("Restarts() = %d, want 1 (last error %v)", got, last)
	}
}
