//go:build !linux

package bench

import "time"

// sleepThread sleeps for d on the Go runtime's timer: off Linux the gated
// handlers' time may overrun by the timer's granularity, which the gated
// report shows as the handler's overshoot.
func sleepThread(d time.Duration) { time.Sleep(d) }
