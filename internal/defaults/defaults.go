// Package defaults holds the defaults of package queue's operator calls
// that the skiplock command shows in its flags' help: one value for both,
// and none of them in queue's exported API (each field's doc states its
// default).
package defaults

const (
	// RequeueBatch is how many tasks one requeue transaction changes.
	RequeueBatch = 5000
	// CancelBatch is how many tasks one cancel transaction changes.
	CancelBatch = 5000
	// PurgeBatch is how many tasks one purge transaction deletes.
	PurgeBatch = 10000
	// ListLimit is how many tasks List returns when the page names no
	// limit.
	ListLimit = 50
	// AuditLimit is how many records AuditLog returns when the filter
	// names no limit.
	AuditLimit = 50
	// RequeueReason is recorded in a requeued task's history when the
	// request gives no reason.
	RequeueReason = "requeued"
)
