//go:build !unix

package delivery

import "net"

// peeker cannot look at a connection here: an idle one counts as open.
type peeker struct{}

func newPeeker(net.Conn) *peeker { return &peeker{} }

func (*peeker) peek() (pending bool, err error) { return false, nil }
