package humanize

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// durationUnits are the units ParseDuration reads: Go's, and days and
// weeks (24h and 168h: calendar days are not its business).
var durationUnits = map[string]time.Duration{
	"ns": time.Nanosecond,
	"us": time.Microsecond,
	"µs": time.Microsecond, // U+00B5
	"μs": time.Microsecond, // U+03BC
	"ms": time.Millisecond,
	"s":  time.Second,
	"m":  time.Minute,
	"h":  time.Hour,
	"d":  24 * time.Hour,
	"w":  7 * 24 * time.Hour,
}

// ErrDuration is the error of a string ParseDuration cannot read.
var ErrDuration = errors.New("not a duration (want e.g. 90s, 15m, 36h, 7d, 2w or 1d12h)")

// ErrNegativeDuration is the error of a negative duration.
var ErrNegativeDuration = errors.New("must not be negative")

// ParseDuration reads a duration as time.ParseDuration does (90s, 1h30m,
// 1.5h), with two more units: d (24 hours) and w (7 days), which combine
// with the others (1w2d, 1d12h). Negative durations are refused: every
// flag that takes one means a length of time. "0" is zero.
func ParseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	if strings.HasPrefix(s, "-") {
		if _, err := ParseDuration(s[1:]); err == nil {
			return 0, ErrNegativeDuration
		}
		return 0, ErrDuration
	}
	rest := s
	if rest == "" {
		return 0, ErrDuration
	}
	var total float64
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] == '.' || ('0' <= rest[i] && rest[i] <= '9')) {
			i++
		}
		num := rest[:i]
		if num == "" || num == "." {
			return 0, ErrDuration
		}
		n, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, ErrDuration
		}
		rest = rest[i:]
		j := 0
		for j < len(rest) && rest[j] != '.' && (rest[j] < '0' || rest[j] > '9') {
			j++
		}
		unit, ok := durationUnits[rest[:j]]
		if !ok {
			return 0, ErrDuration
		}
		rest = rest[j:]
		total += n * float64(unit)
		if total > math.MaxInt64 {
			return 0, ErrDuration
		}
	}
	return time.Duration(math.Round(total)), nil
}

// Duration formats d for a table: whole seconds, minutes and hours (3s,
// 4m12s, 9m, 2h5m, 2h), days and hours past 48 hours (3d4h), and
// milliseconds under a second. A negative d is "in" the future: "in 5m".
func Duration(d time.Duration) string {
	if d < 0 {
		return "in " + Duration(-d)
	}
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return trimZeros(d.Round(time.Second).String())
	case d < 48*time.Hour:
		return trimZeros(d.Round(time.Minute).String())
	}
	d = d.Round(time.Hour)
	days := int64(d / (24 * time.Hour))
	hours := int64((d % (24 * time.Hour)) / time.Hour)
	if hours == 0 {
		return strconv.FormatInt(days, 10) + "d"
	}
	return strconv.FormatInt(days, 10) + "d" + strconv.FormatInt(hours, 10) + "h"
}

// trimZeros drops the zero parts at the end of a time.Duration's String:
// 10m0s is 10m, 2h0m0s is 2h, while 9m40s stays as it is.
func trimZeros(s string) string {
	for _, zero := range []string{"0s", "0m"} {
		if t, ok := strings.CutSuffix(s, zero); ok && t != "" && (t[len(t)-1] < '0' || t[len(t)-1] > '9') {
			s = t
		}
	}
	return s
}
