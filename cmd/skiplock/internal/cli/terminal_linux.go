package cli

import "golang.org/x/sys/unix"

// isTerminalFD asks the terminal driver: /dev/null and other character
// devices answer ENOTTY.
func isTerminalFD(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
	return err == nil
}
