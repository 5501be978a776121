package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/pgerr"
)

// HeldLock is a session or transaction lock held now, by any client of
// the schema.
type HeldLock struct {
	// Names are the names recorded for the lock's key: one, unless names
	// share a key (see Key); none when the key's name was deleted.
	Names []string
	// Key is the lock's key as pg_locks shows it (objid, unsigned).
	Key int64
	// Mode is how it is held.
	Mode Mode
	// PID is the server process of the session holding it; ClientAddr
	// ("" over a Unix socket) and ApplicationName ("skiplock lock " and the
	// client's ID, for a Client's session) say whose it is.
	PID             int
	ClientAddr      string
	ApplicationName string
	// SessionAge is how long that session has been connected.
	SessionAge time.Duration
}

// HeldLease is a lease lock held now, or expired with nobody taking it
// since.
type HeldLease struct {
	Name   string
	Holder string // the holder's Options.ID
	Token  int64
	// AcquiredAt and ExpiresAt are the database's times.
	AcquiredAt time.Time
	ExpiresAt  time.Time
	// ExpiresIn is how long until it expires; negative once expired.
	ExpiresIn time.Duration
}

// Expired reports whether the lease has expired (anyone may take it).
func (h HeldLease) Expired() bool { return h.ExpiresIn <= 0 }

// List returns the named locks and leases held now in the client's
// schema, for monitoring (`skiplock locks` shows them). It needs only
// SELECT on skiplock_locks.
func (c *Client) List(ctx context.Context) ([]HeldLock, []HeldLease, error) {
	rows, err := c.queries.LockSessionList(ctx, c.pool)
	if err != nil {
		return nil, nil, fmt.Errorf("listing named locks: %w", pgerr.Interpret(err))
	}
	locks := make([]HeldLock, 0, len(rows))
	for _, r := range rows {
		h := HeldLock{
			Key: r.Key, Mode: Exclusive, PID: int(r.Pid), ClientAddr: r.ClientAddr, ApplicationName: r.ApplicationName,
			SessionAge: seconds(r.SessionSeconds),
		}
		if r.Shared {
			h.Mode = Shared
		}
		h.Names = r.Names
		locks = append(locks, h)
	}
	lrows, err := c.queries.LockLeaseList(ctx, c.pool)
	if err != nil {
		return nil, nil, fmt.Errorf("listing leases: %w", pgerr.Interpret(err))
	}
	leases := make([]HeldLease, 0, len(lrows))
	for _, r := range lrows {
		leases = append(leases, HeldLease{
			Name: r.Name, Holder: r.Holder, Token: r.Token, AcquiredAt: r.AcquiredAt, ExpiresAt: r.ExpiresAt,
			ExpiresIn: seconds(r.ExpiresInSeconds),
		})
	}
	return locks, leases, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
