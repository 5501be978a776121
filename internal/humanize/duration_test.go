package humanize

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for s, want := range map[string]time.Duration{
		"0":      0,
		"0s":     0,
		"90s":    90 * time.Second,
		"1h30m":  90 * time.Minute,
		"1.5h":   90 * time.Minute,
		"500ms":  500 * time.Millisecond,
		"1d":     24 * time.Hour,
		"30d":    30 * 24 * time.Hour,
		"1.5d":   36 * time.Hour,
		"2w":     14 * 24 * time.Hour,
		"1w2d":   9 * 24 * time.Hour,
		"1d12h":  36 * time.Hour,
		"1d0h5m": 24*time.Hour + 5*time.Minute,
	} {
		got, err := ParseDuration(s)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "d", "1", "10", "-1h", "-x", "1y", "1 d", "a while", "1d-2h", ".d", "1e3s", "99999999w"} {
		if got, err := ParseDuration(s); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", s, got)
		}
	}
}

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		300 * time.Millisecond:                    "300ms",
		3 * time.Second:                           "3s",
		9*time.Minute + 40*time.Second:            "9m40s",
		9*time.Minute + 4*time.Second:             "9m4s",
		10 * time.Minute:                          "10m",
		4*time.Minute + 12*time.Second:            "4m12s",
		2*time.Hour + 5*time.Minute:               "2h5m",
		2 * time.Hour:                             "2h",
		20*time.Hour + 30*time.Second:             "20h1m",
		3*24*time.Hour + 4*time.Hour:              "3d4h",
		3 * 24 * time.Hour:                        "3d",
		-5 * time.Minute:                          "in 5m",
		59*time.Minute + 59*time.Second + 600*1e6: "1h", // rounds up to the hour
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}
