package testschema

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestStale(t *testing.T) {
	old := fmt.Sprintf("sltest_%d_ab", time.Now().Add(-2*time.Hour).Unix())
	fresh := Name("sltest_", "cd")
	names := []string{old, fresh, "sltest_notastamp_ef", "other_" + old[len("sltest_"):], "sltest_"}
	if got := Stale(names, "sltest_", time.Hour); !slices.Equal(got, []string{old}) {
		t.Fatalf("Stale = %v, want only %s", got, old)
	}
}
