// Package childproc runs a test's worker processes: the test binary,
// re-executed in a mode of its own (an environment variable its TestMain
// reads), whose output stays readable while it runs, and that a test can
// SIGKILL, restart and stop gracefully.
package childproc

import (
	"bytes"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a child process.
type Proc struct {
	ID  string
	Cmd *exec.Cmd
	Out *Buffer // its stdout and stderr, readable while it runs

	done chan struct{} // closed once it has exited, with err set
	err  error
}

// Start starts cmd as the process id, with env added to this process's
// environment; its output goes to Out.
func Start(tb testing.TB, id string, cmd *exec.Cmd, env ...string) *Proc {
	tb.Helper()
	cmd.Env = append(os.Environ(), env...)
	p := &Proc{ID: id, Cmd: cmd, Out: &Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Out, p.Out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p
}

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit error (Cmd.Wait's), once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill sends the process SIGKILL and returns once it has exited.
func (p *Proc) Kill() {
	p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// StopGracefully sends every process SIGTERM, then checks that each exits
// 0 within a minute; tail shortens an output for the error.
func StopGracefully(tb testing.TB, tail func(string) string, procs ...*Proc) {
	tb.Helper()
	for _, p := range procs {
		p.Cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
			if p.err != nil {
				tb.Errorf("worker %s exited with %v; output:\n%s", p.ID, p.err, tail(p.Out.String()))
			}
		case <-time.After(60 * time.Second):
			tb.Errorf("worker %s did not stop on SIGTERM", p.ID)
		}
	}
}

// Buffer is a process's output, read while it runs.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
