package worker

import "time"

// SetClock replaces the periodic scheduler's clock, for tests.
func SetClock(cfg *Config, now func() time.Time) { cfg.now = now }
