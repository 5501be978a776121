package lock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/worker/lock"
)

// The cross-process tests run this test binary again as a child that
// holds locks (SKIPLOCK_LOCK_CHILD names what it does), driven by lines on
// its stdin and answering on its stdout.

func TestMain(m *testing.M) {
	if os.Getenv("SKIPLOCK_LOCK_CHILD") != "" {
		os.Exit(childMain())
	}
	pgtest.Main(m)
}

// childMain is the child process:
//
//	hold:    takes session lock $NAME, says "acquired"; "release" releases it.
//	lease:   takes lease $NAME for $TTL, says "acquired <token>"; "renew",
//	         "release".
//	counter: $N times: takes lock $NAME, checks nobody else is inside (an
//	         O_EXCL marker file), increments the number in $FILE; says "done".
//
// Whenever a held lock's Context ends, it says "lost <cause>".
func childMain() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("SKIPLOCK_LOCK_URL"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer pool.Close()
	client, err := lock.New(pool, lock.Options{
		ID: "child-" + strconv.Itoa(os.Getpid()), KeepaliveInterval: 100 * time.Millisecond, PingTimeout: time.Second,
		ManualRenewal: os.Getenv("SKIPLOCK_LOCK_MANUAL") != "",
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer client.Close()
	name := os.Getenv("SKIPLOCK_LOCK_NAME")
	say := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	watch := func(c context.Context) {
		go func() {
			<-c.Done()
			if cause := context.Cause(c); !errors.Is(cause, lock.ErrReleased) {
				say("lost %v", cause)
			}
		}()
	}
	commands := bufio.NewScanner(os.Stdin)
	switch os.Getenv("SKIPLOCK_LOCK_CHILD") {
	case "hold":
		l, err := client.Acquire(ctx, name, lock.Exclusive)
		if err != nil {
			say("error %v", err)
			return 1
		}
		watch(l.Context())
		say("acquired")
		for commands.Scan() {
			if commands.Text() == "release" {
				if err := l.Release(ctx); err != nil {
					say("release-failed %v", err)
				} else {
					say("released")
				}
			}
		}
	case "lease":
		ttl, _ := time.ParseDuration(os.Getenv("SKIPLOCK_LOCK_TTL"))
		l, err := client.AcquireLease(ctx, name, ttl)
		if err != nil {
			say("error %v", err)
			return 1
		}
		watch(l.Context())
		say("acquired %d", l.Token())
		for commands.Scan() {
			switch commands.Text() {
			case "renew":
				if err := l.Renew(ctx); err != nil {
					say("renew-failed %v", err)
				} else {
					say("renewed")
				}
			case "release":
				if err := l.Release(ctx); err != nil {
					say("release-failed %v", err)
				} else {
					say("released")
				}
			}
		}
	case "counter":
		n, _ := strconv.Atoi(os.Getenv("SKIPLOCK_LOCK_N"))
		file := os.Getenv("SKIPLOCK_LOCK_FILE")
		for range n {
			l, err := client.Acquire(ctx, name, lock.Exclusive)
			if err != nil {
				say("error %v", err)
				return 1
			}
			marker, err := os.OpenFile(file+".inside", os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				say("overlap %v", err)
				return 1
			}
			marker.Close()
			b, _ := os.ReadFile(file)
			v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			time.Sleep(time.Millisecond) // widen the window a missing lock would leave
			os.WriteFile(file, []byte(strconv.Itoa(v+1)), 0o600)
			os.Remove(file + ".inside")
			if err := l.Release(ctx); err != nil {
				say("error %v", err)
				return 1
			}
		}
		say("done")
	}
	return 0
}

// child is a running child process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startChild starts a child doing what, with env (SKIPLOCK_LOCK_ names
// without the prefix), connected through cfg.
func startChild(t *testing.T, cfg *pgxpool.Config, what string, env map[string]string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SKIPLOCK_LOCK_CHILD="+what, "SKIPLOCK_LOCK_URL="+connURL(cfg))
	for k, v := range env {
		cmd.Env = append(cmd.Env, "SKIPLOCK_LOCK_"+k+"="+v)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 100)}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			c.lines <- s.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("child %s (pid %d) stderr:\n%s", what, cmd.Process.Pid, stderr.String())
		}
	})
	return c
}

// expect returns the next line of the child that starts with prefix,
// failing the test on a line starting with "error" or "overlap", or when
// none comes in Patient(within).
func (c *child) expect(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	timeout := time.After(pgtest.Patient(within))
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				t.Fatalf("child exited waiting for %q", prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return strings.TrimSpace(strings.TrimPrefix(line, prefix))
			}
			if strings.HasPrefix(line, "error") || strings.HasPrefix(line, "overlap") {
				t.Fatalf("child: %s", line)
			}
			t.Logf("child: %s", line)
		case <-timeout:
			t.Fatalf("timed out waiting for the child to say %q", prefix)
		}
	}
}

func (c *child) send(t *testing.T, command string) {
	t.Helper()
	if _, err := fmt.Fprintln(c.stdin, command); err != nil {
		t.Fatal(err)
	}
}

// connURL is cfg as a connection string, search_path included.
func connURL(cfg *pgxpool.Config) string {
	cc := cfg.ConnConfig
	u := url.URL{Scheme: "postgres", Host: cc.Host + ":" + strconv.Itoa(int(cc.Port)), Path: "/" + cc.Database}
	if strings.HasPrefix(cc.Host, "/") {
		u.Host = ""
	}
	if cc.Password != "" {
		u.User = url.UserPassword(cc.User, cc.Password)
	} else {
		u.User = url.User(cc.User)
	}
	q := url.Values{}
	if strings.HasPrefix(cc.Host, "/") {
		q.Set("host", cc.Host)
		q.Set("port", strconv.Itoa(int(cc.Port)))
	}
	q.Set("sslmode", "disable")
	for k, v := range cc.RuntimeParams {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}
