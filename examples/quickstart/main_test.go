package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// These tests need no database; cmd/skiplock-quickstart's test runs the
// example end to end against one.

// Without DATABASE_URL, the example says what to set.
func TestQuickstartNoDatabaseURL(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := run(context.Background(), &out, "")
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL is not set: export DATABASE_URL=postgres://") {
		t.Fatalf("err = %v, want DATABASE_URL is not set", err)
	}
	if out.Len() != 0 {
		t.Fatalf("printed %q before failing", out.String())
	}
}

// A dead server's error is said once, not once per connection attempt.
func TestQuickstartDeadServer(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := run(context.Background(), &out, "postgres://nobody@127.0.0.1:1/nothing?connect_timeout=5")
	if err == nil {
		t.Fatal("run succeeded against a dead server")
	}
	msg := err.Error()
	if n := strings.Count(msg, "connection refused"); n != 1 || strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "cannot connect to DATABASE_URL: ") {
		t.Fatalf("error says connection refused %d times, or spans lines, or names no DATABASE_URL; want once on one line: %q", n, msg)
	}
}
