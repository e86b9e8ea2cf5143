//go:build unix

package delivery

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// peeker looks at a connection's socket without waiting or consuming
// anything. Made once per connection, it allocates nothing per look.
type peeker struct {
	rc   syscall.RawConn
	buf  [1]byte
	n    int
	err  error
	recv func(fd uintptr) bool
}

func newPeeker(conn net.Conn) *peeker {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return &peeker{}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return &peeker{}
	}
	p := &peeker{rc: rc}
	p.recv = func(fd uintptr) bool {
		p.n, _, p.err = syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // done, whatever it found: never wait
	}
	return p
}

// peek reports whether bytes wait on the connection; io.EOF (or the
// error) when the partner closed it.
func (p *peeker) peek() (pending bool, err error) {
	if p.rc == nil {
		return false, nil
	}
	if err := p.rc.Read(p.recv); err != nil {
		return false, err
	}
	switch {
	case errors.Is(p.err, syscall.EAGAIN) || errors.Is(p.err, syscall.EWOULDBLOCK):
		return false, nil
	case p.err != nil:
		return false, p.err
	case p.n == 0:
		return false, io.EOF
	}
	return true, nil
}
