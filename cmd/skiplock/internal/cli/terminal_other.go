//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly

package cli

// isTerminalFD cannot tell here; commands take the non-interactive path,
// which --yes satisfies.
func isTerminalFD(uintptr) bool { return false }
