//go:build unix

package natsd

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes f's exclusive flock without waiting: false when another
// open file description holds it.
func lockFile(f *os.File) (bool, error) {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return false, nil
		default:
			return false, err
		}
	}
}
