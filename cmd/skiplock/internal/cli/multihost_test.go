package cli_test

import (
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/cli"
)

// With a multi-host URL the command goes to the first host that answers
// (and is writable, with target_session_attrs=read-write): after a failover
// the first host may be the old primary, silent now. connect_timeout bounds
// each host, not the whole attempt.
func TestMultiHostURL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A host that accepts connections and never answers: a dead machine
	// whose packets vanish, as seen by a client.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	held := make(chan net.Conn, 100)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held <- c // never answered
		}
	}()
	defer func() {
		for {
			select {
			case c := <-held:
				c.Close()
			default:
				return
			}
		}
	}()
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = silent.Addr().String() + "," + u.Host
	q := u.Query()
	q.Set("connect_timeout", "1")
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	if r := b.run(t, "stats", "--database-url", u.String()); r.code != cli.ExitOK {
		t.Fatalf("stats through %s exited %d: %s", u.Host, r.code, r.stderr)
	}

	// Every host down: one line naming each, exit 1, at once.
	u.Host = "127.0.0.1:1,127.0.0.1:2"
	r := b.run(t, "stats", "--database-url", u.String())
	line := r.oneLine(t)
	if r.code != cli.ExitError || !strings.Contains(line, "127.0.0.1:1, 127.0.0.1:2") {
		t.Fatalf("exit %d, %q; want exit 1 and one line naming both hosts", r.code, line)
	}
}
