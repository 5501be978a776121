package worker

import (
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The lock session is built from the pool's config: with a multi-host URL
// it must keep the other hosts and target_session_attrs, or after a
// failover it would reconnect to the old primary (now a standby, or dead)
// and never find the new one. The listener copies the config the same way.
func TestLockSessionKeepsHosts(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig("postgres://u@127.0.0.1:5001,127.0.0.1:5002,127.0.0.1:5003/db?target_session_attrs=read-write&sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	ls := newLockSession(cfg.ConnConfig, 1, 1, Config{}.sessionTuning(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	var ports []uint16
	ports = append(ports, ls.config.Port)
	for _, f := range ls.config.Fallbacks {
		ports = append(ports, f.Port)
	}
	if len(ports) != 3 || ports[0] != 5001 || ports[1] != 5002 || ports[2] != 5003 {
		t.Errorf("the lock session would try ports %v, want [5001 5002 5003]", ports)
	}
	if ls.config.ValidateConnect == nil {
		t.Error("the lock session lost target_session_attrs=read-write: it could settle on a standby")
	}
}
