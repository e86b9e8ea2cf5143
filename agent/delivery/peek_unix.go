//go:build unix

package delivery

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// peek reports, without waiting or consuming anything, whether bytes wait
// on conn; io.EOF (or the error) when the partner closed it.
func peek(conn net.Conn) (pending bool, err error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, err
	}
	var buf [1]byte
	var n int
	var recvErr error
	if err := rc.Read(func(fd uintptr) bool {
		n, _, recvErr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // done, whatever it found: never wait
	}); err != nil {
		return false, err
	}
	switch {
	case errors.Is(recvErr, syscall.EAGAIN) || errors.Is(recvErr, syscall.EWOULDBLOCK):
		return false, nil
	case recvErr != nil:
		return false, recvErr
	case n == 0:
		return false, io.EOF
	}
	return true, nil
}
