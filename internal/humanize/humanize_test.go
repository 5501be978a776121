package humanize

import (
	"math"
	"testing"
)

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{
		0:             "0",
		7:             "7",
		999:           "999",
		1000:          "1,000",
		-1000:         "-1,000",
		1234567:       "1,234,567",
		-123456:       "-123,456",
		math.MaxInt64: "9,223,372,036,854,775,807",
		math.MinInt64: "-9,223,372,036,854,775,808",
	} {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
}
