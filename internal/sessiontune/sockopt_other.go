//go:build !linux

package sessiontune

import (
	"syscall"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist: the
// keepalives, the server's settings and the ping still bound detection.
func setUserTimeout(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
