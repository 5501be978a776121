package control

import "testing"

func TestCancelRoundTrip(t *testing.T) {
	t.Parallel()
	for _, id := range []int64{1, 42, 1 << 40} {
		if got, ok := ParseCancel(Cancel(id)); !ok || got != id {
			t.Errorf("ParseCancel(Cancel(%d)) = %d, %v", id, got, ok)
		}
	}
	for _, msg := range []string{"", "cancel:", "cancel:x", "pause:1", "email"} {
		if _, ok := ParseCancel(msg); ok {
			t.Errorf("ParseCancel(%q) accepted a message that is not a cancel command", msg)
		}
	}
}
