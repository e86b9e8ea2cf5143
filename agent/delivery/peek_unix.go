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
	look func(fd uintptr)
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
	p.look = func(fd uintptr) {
		p.n, _, p.err = syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}
	return p
}

// peek reports whether bytes wait on the connection; io.EOF (or the
// error) when the partner closed it.
//
// It looks through Control, not Read: Read first checks the socket's read
// deadline, and a pooled connection still carries the one of the last
// request it read an answer for. Once a connection sat idle for longer
// than that request's timeout, Read would fail at once with an i/o
// timeout, the attempt would be sent again on the next pooled connection,
// fail the same way, and end as "timeout after ..." charged to a partner
// that never saw it. The recv never waits (MSG_DONTWAIT), so no deadline
// has anything to bound.
func (p *peeker) peek() (pending bool, err error) {
	if p.rc == nil {
		return false, nil
	}
	if err := p.rc.Control(p.look); err != nil {
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
