// Package apicheck writes down the exported API of skiplock's public
// packages, as Go keeps api/go1.*.txt, so that a change to it is a diff a
// reviewer sees.
//
// testdata/ holds one file per public package (queue.txt,
// worker_lock.txt, ...): one line per exported identifier, sorted. The
// test regenerates them from the compiled packages and fails with a diff
// when they differ. After a deliberate change to the API, rewrite them:
//
//	go test ./internal/apicheck -update
//
// and commit testdata/ with the change. `go test -v ./internal/apicheck`
// also prints, per package, the count of exported identifiers and of
// lines of `go doc -all`.
//
// It uses the standard library only (go/types on the compiler's export
// data, found with `go list -export`), so the library module requires
// nothing for it.
package apicheck
