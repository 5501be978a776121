// Package lock gives application code the distributed locks that skiplock
// runs on: named locks held in PostgreSQL, released when their holder's
// connection dies, with the loss reported to the holder.
//
//   - Session locks (Client.Acquire, Client.TryAcquire): advisory locks on a
//     connection of the client's own, kept alive by pings; a holder that
//     dies or is cut off loses them within seconds, and the lock's Context
//     ends.
//   - Transaction locks (InTx, TryInTx): held until the caller's
//     transaction ends.
//   - Lease locks (Client.AcquireLease, Client.TryLease): a row with an
//     expiry and a fencing token, renewed while held, for callers behind a
//     transaction pooler (PgBouncer) that cannot keep a session.
//   - RunOnce: one node of a cluster runs a job, the others skip it.
//
// Locks may be Exclusive or Shared. `skiplock locks` lists the locks and
// leases held now, by name. The guide: docs/LOCKS.md.
//
//	client, err := lock.New(pool, lock.Options{})
//	if err != nil { ... }
//	defer client.Close()
//	l, err := client.Acquire(ctx, "billing:rebuild", lock.Exclusive, 30*time.Second)
//	if err != nil { ... } // errors.Is(err, lock.ErrNotAcquired): someone else has it
//	defer l.Release(ctx)
//	rebuild(l.Context()) // ends if the lock is lost
package lock
