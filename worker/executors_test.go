package worker

import (
	"sync"
	"testing"
	"time"
)

// An executor that finished its attempt takes the next one, rather than a
// new goroutine being started for it; stop ends the idle executors.
func TestExecutorsReuseAndStop(t *testing.T) {
	x := newExecutors()
	var ran sync.WaitGroup
	release := make(chan struct{})
	run := func(e *execution) {
		defer ran.Done()
		if e.task.Name == "block" {
			<-release
		}
	}
	start := func(name string) {
		ran.Add(1)
		x.start(&execution{task: &Task{Name: name}}, run)
	}
	waitIdle := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for x.idle.Load() != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d executors idle, want %d", x.idle.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}

	for range 3 {
		start("block") // none idle: three goroutines
	}
	close(release)
	ran.Wait()
	waitIdle(3)
	for range 100 {
		start("quick")
		ran.Wait()
		waitIdle(3)
	}
	if got := x.started.Load(); got != 3 {
		t.Fatalf("%d goroutines started for 103 tasks, at most 3 at once; want 3", got)
	}
	x.stop()
	waitIdle(0)
}
