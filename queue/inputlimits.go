package queue

import (
	"fmt"

	"github.com/skiplock/skiplock/internal/humanize"
)

// What one task may carry. A Client checks every limit before it sends
// anything, and refuses a task over one with an error wrapping
// ErrInvalidTask that names the limit, the size and how to change it:
//
//	skiplock: invalid task: task "report.build": payload is 2,345,678 bytes,
//	over the 1,048,576-byte limit (queue.WithMaxPayloadSize)
//
// The SQL enqueue functions check the same limits (docs/SQL.md).
const (
	// DefaultMaxPayloadSize bounds a task's payload, in bytes of encoded
	// JSON: 1 MiB. A payload is sent to the worker with every claim of its
	// task and stays in its memory while the handler runs, a claim takes up
	// to Config.ClaimBatch tasks at once, and the row is rewritten at each
	// attempt's outcome: a payload much larger than a page of text makes
	// every one of those slow, and is better kept in object storage, with
	// its address in the payload. Change it with WithMaxPayloadSize.
	DefaultMaxPayloadSize = 1 << 20
	// DefaultMaxMetadataSize bounds a task's metadata, in bytes of encoded
	// JSON, once the enqueue hooks have added theirs: 64 KiB. Metadata is
	// for small things that travel beside the payload (trace context, a
	// tenant, a request ID), and 64 KiB holds hundreds of them while
	// catching a payload passed as metadata by mistake. Change it with
	// WithMaxMetadataSize.
	DefaultMaxMetadataSize = 64 << 10
)

// WithMaxPayloadSize sets the largest payload the Client enqueues, in bytes
// of encoded JSON. Defaults to DefaultMaxPayloadSize (so does 0); negative
// sets no limit but PostgreSQL's own (a jsonb value of at most 255 MiB).
func WithMaxPayloadSize(n int) ClientOption {
	return func(c *Client) { c.limits.payload = sizeLimit(n, DefaultMaxPayloadSize) }
}

// WithMaxMetadataSize sets the largest metadata the Client enqueues, in
// bytes of encoded JSON, measured after the enqueue hooks ran. Defaults to
// DefaultMaxMetadataSize (so does 0); negative sets no limit.
func WithMaxMetadataSize(n int) ClientOption {
	return func(c *Client) { c.limits.metadata = sizeLimit(n, DefaultMaxMetadataSize) }
}

// inputLimits are a Client's size limits, in bytes; negative: none.
type inputLimits struct {
	payload, metadata int
}

var defaultInputLimits = inputLimits{payload: DefaultMaxPayloadSize, metadata: DefaultMaxMetadataSize}

func sizeLimit(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

// checkSize refuses task's value of size bytes over limit (negative: none).
func checkSize(task, what string, size, limit int, option string) error {
	if limit < 0 || size <= limit {
		return nil
	}
	return fmt.Errorf("%w: task %q: %s is %s bytes, over the %s-byte limit (%s)",
		ErrInvalidTask, task, what, humanize.Count(int64(size)), humanize.Count(int64(limit)), option)
}

// checkLength refuses an empty value (when required) and one longer than
// max bytes. The error quotes the start of an overlong value, not all of
// it: it may be huge.
func checkLength(what, s string, required bool, max int, constant string) error {
	switch {
	case s == "" && required:
		return fmt.Errorf("%w: %s is empty", ErrInvalidTask, what)
	case len(s) > max:
		return fmt.Errorf("%w: %s is %s bytes, over the %s-byte limit (%s): %s",
			ErrInvalidTask, what, humanize.Count(int64(len(s))), humanize.Count(int64(max)), constant, clipQuoted(s))
	}
	return nil
}

// clipQuoted quotes the first 40 bytes of s, and says when there is more.
func clipQuoted(s string) string {
	const n = 40
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q...", s[:n])
}
