package bench

import (
	"syscall"
	"time"
)

// sleepThread blocks the calling thread for up to d, as the kernel's
// timers count it (nanosleep), not the Go runtime's; the runtime runs
// other goroutines on other threads meanwhile. A signal may end it early:
// workFor sleeps again for what is left.
func sleepThread(d time.Duration) {
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	_ = syscall.Nanosleep(&ts, nil)
}
