package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/worker/lock"
)

// The named locks of application code (package worker/lock), as
// `skiplock locks` shows them after the task locks.

type namedLockJSON struct {
	Names           []string `json:"names"`
	Key             int64    `json:"key"`
	Mode            string   `json:"mode"`
	PID             int      `json:"pid"`
	ClientAddr      string   `json:"client_addr"`
	ApplicationName string   `json:"application_name"`
}

type leaseJSON struct {
	Name             string    `json:"name"`
	Holder           string    `json:"holder"`
	Token            int64     `json:"token"`
	AcquiredAt       time.Time `json:"acquired_at"`
	ExpiresAt        time.Time `json:"expires_at"`
	ExpiresInSeconds float64   `json:"expires_in_seconds"`
	Expired          bool      `json:"expired"`
}

func namedLocks(ctx context.Context, pool *pgxpool.Pool) ([]lock.HeldLock, []lock.HeldLease, error) {
	client, err := lock.New(pool, lock.Options{})
	if err != nil {
		return nil, nil, err
	}
	return client.List(ctx)
}

func namedLocksJSON(locks []lock.HeldLock, leases []lock.HeldLease) ([]namedLockJSON, []leaseJSON) {
	ls := make([]namedLockJSON, len(locks))
	for i, l := range locks {
		ls[i] = namedLockJSON{Names: l.Names, Key: l.Key, Mode: l.Mode.String(), PID: l.PID, ClientAddr: l.ClientAddr, ApplicationName: l.ApplicationName}
		if ls[i].Names == nil {
			ls[i].Names = []string{}
		}
	}
	es := make([]leaseJSON, len(leases))
	for i, l := range leases {
		es[i] = leaseJSON{Name: l.Name, Holder: l.Holder, Token: l.Token, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt,
			ExpiresInSeconds: l.ExpiresIn.Seconds(), Expired: l.Expired()}
	}
	return ls, es
}

func printNamedLocks(w io.Writer, locks []lock.HeldLock, leases []lock.HeldLease) error {
	if len(locks) == 0 && len(leases) == 0 {
		fmt.Fprintln(w, "No named locks or leases are held.")
		return nil
	}
	if len(locks) > 0 {
		fmt.Fprintf(w, "Named locks held (%d):\n", len(locks))
		tw := table(w, "NAME", "MODE", "PID", "CLIENT", "APPLICATION")
		for _, l := range locks {
			name := strings.Join(l.Names, ", ")
			if name == "" {
				name = fmt.Sprintf("(key %d)", l.Key)
			}
			row(tw, name, l.Mode, l.PID, orDash(l.ClientAddr), orDash(l.ApplicationName))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(leases) > 0 {
		if len(locks) > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "Leases (%d):\n", len(leases))
		tw := table(w, "NAME", "HOLDER", "TOKEN", "EXPIRES IN")
		for _, l := range leases {
			expires := short(l.ExpiresIn)
			if l.Expired() {
				expires = "expired " + short(-l.ExpiresIn) + " ago"
			}
			row(tw, l.Name, l.Holder, l.Token, expires)
		}
		return tw.Flush()
	}
	return nil
}
