package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress keeps one status line on the terminal (rewritten in place) or,
// when stderr is a file or pipe, prints it every few seconds so that logs
// stay readable.
type progress struct {
	w        io.Writer
	tty      bool
	interval time.Duration

	mu      sync.Mutex
	last    time.Time
	lastLen int
}

func newProgress(w io.Writer) *progress {
	if w == nil {
		w = io.Discard
	}
	// The worker processes' stderr may be this writer too (lockedWriter):
	// a bytes.Buffer, in the tests, takes one write at a time.
	p := &progress{w: lockedWriter{w: w}, interval: 5 * time.Second}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty, p.interval = true, 0
		}
	}
	return p
}

// status replaces the status line.
func (p *progress) status(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.last) < p.interval {
		return
	}
	p.last = now
	line := fmt.Sprintf(format, args...)
	if !p.tty {
		fmt.Fprintln(p.w, line)
		return
	}
	pad := max(p.lastLen-len(line), 0)
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
	p.lastLen = len(line)
}

// logf prints a line that stays, clearing the status line first.
func (p *progress) logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// clear removes the status line.
func (p *progress) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
}

func (p *progress) clearLocked() {
	if p.tty && p.lastLen > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.lastLen))
		p.lastLen = 0
	}
	p.last = time.Time{}
}

// track refreshes the status line from fn every 200ms until the returned
// stop is called.
func (p *progress) track(fn func() string) (stop func()) {
	ctx, done := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		every(ctx, 200*time.Millisecond, func() bool {
			p.status("%s", fn())
			return true
		})
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			done()
			<-finished
			p.clear()
		})
	}
}
