package hapg_test

import (
	"context"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/internal/testinfra/hapg"
)

// TestFormation boots a formation and checks what the failover tests
// (internal/failover) rely on besides the failover itself: synchronous
// replication, the multi-host URL reaching the primary, and a Close that
// leaves nothing running.
func TestFormation(t *testing.T) {
	ctx := context.Background()
	f, err := hapg.Start(ctx, hapg.Options{Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	before, err := f.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, f.URL())
	if err != nil {
		t.Fatal(err)
	}
	var port int
	var standbys string
	if err := conn.QueryRow(ctx, "SELECT inet_server_port(), current_setting('synchronous_standby_names')").Scan(&port, &standbys); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if port != before.Port {
		t.Errorf("the multi-host URL reached port %d; the primary is on %d", port, before.Port)
	}
	if standbys == "" {
		t.Error("synchronous_standby_names is empty: commits are not synchronously replicated")
	}

	// Close stops every process of the formation, postmasters included.
	f.Close()
	for _, n := range append([]*hapg.Node{f.Monitor}, f.Nodes...) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port)), time.Second)
		if err == nil {
			c.Close()
			t.Errorf("%s still listens on port %d after Close", n.Name, n.Port)
		}
	}
}
