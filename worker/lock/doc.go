// Package lock gives application code the distributed locks that skiplock
// runs on: named locks held in PostgreSQL, released when their holder's
// connection dies, with the loss reported to the holder.
//
// Start with a [Client], one per process, made by [New] from a
// pgxpool.Pool. Its Acquire returns a [*Lock]; the lock's Context ends if the lock is
// lost, so run the work under it:
//
//	client, err := lock.New(pool, lock.Options{})
//	if err != nil { ... }
//	defer client.Close()
//
//	wait, cancel := context.WithTimeout(ctx, 30*time.Second) // bounds the wait only
//	defer cancel()
//	l, err := client.Acquire(wait, "billing:rebuild", lock.Exclusive)
//	if errors.Is(err, lock.ErrNotAcquired) { ... } // someone else has it
//	defer l.Release(ctx)
//	rebuild(l.Context()) // ends if the lock is lost
//
// Three kinds of lock, each with a call that waits as long as its context
// allows and a Try form that never waits:
//
//   - Session locks ([Client.Acquire], [Client.TryAcquire]): advisory locks on a
//     connection of the client's own, kept alive by pings; a holder that
//     dies or is cut off loses them within seconds, and the lock's Context
//     ends.
//   - Transaction locks ([InTx], [TryInTx]): held until the caller's
//     transaction ends; no Client needed.
//   - Leases ([Client.AcquireLease], [Client.TryLease]): a row with an expiry
//     and a fencing token, renewed while held, for callers behind a
//     transaction pooler (PgBouncer) that cannot keep a session.
//
// [RunOnce] lets one node of a cluster run a job while the others skip it.
// Locks may be Exclusive or Shared. A lock not acquired gives an error
// wrapping [ErrNotAcquired]; a lost one ends its Context with
// [ErrLockLost]. [Client.List], and `skiplock locks`, show the locks and leases held now.
//
// Example (in this package's examples) takes a session lock, a lease and
// a RunOnce between two nodes. The guide, with what is guaranteed and the
// figures measured: docs/LOCKS.md.
package lock
