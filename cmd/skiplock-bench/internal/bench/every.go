package bench

import (
	"context"
	"time"
)

// every calls pass every d until ctx ends or pass returns false: the loop
// of the workloads' producers, purgers and samplers.
func every(ctx context.Context, d time.Duration, pass func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !pass() {
				return
			}
		}
	}
}

// failure is the first error a run's goroutines sent on errs, else ctx's
// error, once they have stopped.
func failure(ctx context.Context, errs <-chan error) error {
	select {
	case err := <-errs:
		return err
	default:
	}
	return ctx.Err()
}
