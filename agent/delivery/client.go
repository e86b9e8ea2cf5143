package delivery

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// The HTTP client is fasthttp's: the caller's goroutine writes the
// request and reads the answer on a pooled connection, where net/http's
// transport hands each request to a writer and a reader goroutine and
// allocates ~50 times; a delivery costs about half the CPU. It speaks
// HTTP/1.1 (over TLS for https), which every webhook receiver accepts.

const (
	// maxAnswerBody is how much of an answer is read: a 2xx's body is
	// not looked at, a refusal's first bytes go into the attempt's error.
	// Past it the connection is closed, not drained.
	maxAnswerBody = 64 << 10
	// answerBuffer bounds an answer's status line and headers.
	answerBuffer = 64 << 10
	// idleTimeout is how long an unused connection stays pooled.
	idleTimeout = 90 * time.Second
	// maxConnsPerHost is far above what a destination's max_in_flight
	// allows (the scheduler bounds attempts in flight, not the client).
	maxConnsPerHost = 1 << 16
	// sendTries bounds how often a request is tried when pooled
	// connections turn out closed by the partner while they sat idle.
	// Each such one is found before anything is written (closedWhileIdle:
	// one non-blocking read), and after a burst a partner that ends idle
	// connections quickly (Node's 5 s keep-alive, gunicorn's 2 s) has
	// closed as many as the burst opened: every one is passed over, so
	// the bound is the pool's, not a small count that a burst would use
	// up (the attempt then failed with "connection error: EOF").
	sendTries = 4096
)

// newClient returns a client for one scheme (tls: https) whose
// connections go through dialer (and its SSRF guard).
func newClient(dialer *egressDialer, tlsConfig *tls.Config, useTLS bool) *fasthttp.Client {
	return &fasthttp.Client{
		DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
			return dial(dialer, tlsConfig, useTLS, addr, timeout)
		},
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true, // canonical already
		DisablePathNormalizing:        true, // the URL as registered
		MaxConnsPerHost:               maxConnsPerHost,
		MaxIdleConnDuration:           idleTimeout,
		MaxResponseBodySize:           maxAnswerBody,
		ReadBufferSize:                answerBuffer,
		MaxIdemponentCallAttempts:     sendTries,
		RetryIfErr:                    retryIdleClosed,
	}
}

// dial opens a connection to addr within timeout (at most the dialer's
// own), and for TLS completes the handshake, so that what the partner
// sends and answers is counted above TLS (trackedConn). A handshake's
// failure (the partner's alert among them) is the dial's error, which
// fasthttp returns as the attempt's.
func dial(dialer *egressDialer, tlsConfig *tls.Config, useTLS bool, addr string, timeout time.Duration) (net.Conn, error) {
	limit := dialer.timeout()
	if timeout > 0 && timeout < limit {
		limit = timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if !useTLS {
		return &trackedConn{Conn: conn, raw: newPeeker(conn), unread: dialer.unread}, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		conn.Close()
		return nil, err
	}
	cfg := tlsConfig.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg.ServerName = host
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return &trackedTLSConn{trackedConn{Conn: tc, raw: newPeeker(conn), refusals: dialer.refusals, unread: dialer.unread}}, nil
}

// trackedConn finds, before a request goes out on a pooled connection,
// whether the partner closed it while it sat idle (a race any pool loses
// now and then; net/http's reader goroutine notices it the same way): the
// request then goes out on a fresh connection, as net/http does for a
// request it may replay. A partner that hangs up on a request fails the
// attempt. fasthttp uses a connection for one request at a time.
type trackedConn struct {
	net.Conn
	// raw looks at the TCP connection (under TLS for https).
	raw *peeker
	// used: a request went out on the connection; answering: its answer
	// is being read, so the next write begins another request.
	used, answering bool
	probe           [1]byte
	// refusals records a TLS alert read on the connection (nil: plain
	// http).
	refusals *tlsRefusals
	// unread records a read that timed out with the answer waiting.
	unread *unreadAnswers
	// readDeadline is the read deadline last set (by the client, or by a
	// grace): how late a timed-out read returned is measured from it.
	readDeadline time.Time
	// graced: the answer being read was already given its grace.
	graced bool
}

func (c *trackedConn) Write(p []byte) (int, error) {
	if c.answering {
		c.answering = false
		if err := c.closedWhileIdle(); err != nil {
			return 0, &idleClosedError{err}
		}
	}
	c.used = true
	c.graced = false // a request goes out: its answer may have a grace
	return c.Conn.Write(p)
}

// SetReadDeadline is where the client's deadline reaches the connection:
// fasthttp's DoDeadline enforces its deadline only through the
// connection's read and write deadlines (transport.RoundTrip; no timer of
// its own ends a call while the read goes on), so a grace given here
// really lets the answer be read.
func (c *trackedConn) SetReadDeadline(t time.Time) error {
	c.readDeadline = t
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets the read deadline too.
func (c *trackedConn) SetDeadline(t time.Time) error {
	c.readDeadline = t
	return c.Conn.SetDeadline(t)
}

// The answer's grace. A read that times out while the partner's answer
// waits in the socket is one of two things. The partner may be trickling
// its answer: then the deadline passed on time, and the timeout is the
// partner's, like any other. Or this process was not running when the
// deadline passed (stopped by SIGSTOP, or starved of CPU): the read then
// returns late, and the answer — often a 2xx: the partner acted on the
// request — is the attempt's real outcome; failing the attempt would send
// the event again, a duplicate the partner sees. Such a read gets one
// grace per answer: answerGrace more to read what is waiting. An answer
// still unread after it (the process stopped again) is recorded in
// unreadAnswers: a failure that is the agent's, not the partner's.
const (
	// lateRead is how late a timed-out read must return for this process
	// to count as not running at its deadline. On time, the runtime's
	// timer wakes a read within milliseconds; measured on a 2-core
	// machine at a load of 14 with every P busy, 2,000 reads timed out at
	// most 186 ms late (p99 70 ms). A SIGSTOP lasts seconds. Taking a
	// trickling partner for a late agent costs at most answerGrace once,
	// and the outcome read is still the partner's own.
	lateRead = 200 * time.Millisecond
	// answerGrace bounds the extra wait for an answer already waiting:
	// reading it takes microseconds; the rest of an answer that came at
	// once is on its way.
	answerGrace = time.Second
)

func (c *trackedConn) Read(p []byte) (int, error) {
	c.answering = c.used
	for {
		n, err := c.Conn.Read(p)
		if err == nil {
			return n, nil
		}
		if refusedHandshake(err) {
			c.refusals.record(c.Conn, err)
		}
		if n > 0 || !isTimeout(err) || !c.lateWithAnswerWaiting() {
			return n, err
		}
		if c.graced {
			c.unread.record(c.Conn, struct{}{})
			return n, err
		}
		c.graced = true
		if err := c.SetReadDeadline(time.Now().Add(answerGrace)); err != nil {
			return 0, err
		}
	}
}

// lateWithAnswerWaiting reports, after a read timed out, whether it
// returned lateRead or more past its deadline with the partner's answer
// waiting to be read.
func (c *trackedConn) lateWithAnswerWaiting() bool {
	if c.readDeadline.IsZero() || time.Since(c.readDeadline) < lateRead {
		return false
	}
	pending, _ := c.raw.peek()
	return pending
}

func isTimeout(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

// unreadAnswers are the connections whose answer read timed out late,
// after its grace, while the partner's answer sat in the socket, not yet
// read: the deadline passed while this process was not running (stopped,
// as by SIGSTOP, or starved of CPU), not while the partner was thinking.
// A partner that never answers leaves nothing to read, one that trickles
// its answer is read on time, and their timeouts stay their own.
// fasthttp reports every timeout as the same ErrTimeout.
type unreadAnswers = connNotes[struct{}]

// connNotes are what a connection's reads found that fasthttp's error
// does not carry, kept until the attempt whose request went out on the
// connection takes its own. fasthttp closes a failed request's
// connection, so the attempt looks its connection up by its addresses
// (the response keeps them): only what its own connection read is
// ever an attempt's.
type connNotes[T any] struct {
	mu    sync.Mutex
	conns map[connAddrs]T
}

// connAddrs name a connection: the local and remote addresses of a TCP
// connection are unique while it and its TIME_WAIT last, far longer than
// the attempt that looks them up.
type connAddrs struct{ local, remote string }

// record notes v for conn. Safe on nil.
func (n *connNotes[T]) record(conn net.Conn, v T) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns == nil {
		n.conns = map[connAddrs]T{}
	}
	n.conns[connAddrs{conn.LocalAddr().String(), conn.RemoteAddr().String()}] = v
}

// take returns (and forgets) what was noted for the connection between
// local and remote; found is false when nothing was (or when no
// connection was made: no addresses).
func (n *connNotes[T]) take(local, remote net.Addr) (v T, found bool) {
	if n == nil || local == nil || remote == nil {
		return v, false
	}
	key := connAddrs{local.String(), remote.String()}
	n.mu.Lock()
	defer n.mu.Unlock()
	v, found = n.conns[key]
	delete(n.conns, key)
	return v, found
}

// closedWhileIdle is the connection's end (or bytes nobody asked for)
// found without waiting; nil while it is open and quiet.
func (c *trackedConn) closedWhileIdle() error {
	pending, err := c.raw.peek()
	if err != nil || !pending {
		return err
	}
	tc, ok := c.Conn.(*tls.Conn)
	if !ok {
		return errors.New("the partner sent bytes on an idle connection")
	}
	// Over TLS they may be the partner's close_notify: read them (at once,
	// they are there) and see.
	if err := tc.SetReadDeadline(time.Now().Add(idleProbeWait)); err != nil {
		return err
	}
	n, err := tc.Read(c.probe[:])
	if reset := tc.SetReadDeadline(time.Time{}); reset != nil {
		return reset
	}
	switch {
	case n > 0:
		return errors.New("the partner sent bytes on an idle connection")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil // a TLS record without data (a session ticket)
	case err == nil:
		return io.ErrNoProgress
	}
	return err
}

// trackedTLSConn is a trackedConn over TLS; Handshake tells fasthttp the
// handshake is done (it would wrap it in TLS again).
type trackedTLSConn struct{ trackedConn }

func (c *trackedTLSConn) Handshake() error { return c.Conn.(*tls.Conn).Handshake() }

// idleProbeWait bounds the read of bytes found on an idle TLS connection.
const idleProbeWait = 5 * time.Millisecond

// idleClosedError is a pooled connection's failure before any answer
// came: the partner closed it while it sat idle.
type idleClosedError struct{ err error }

func (e *idleClosedError) Error() string { return e.err.Error() }
func (e *idleClosedError) Unwrap() error { return e.err }

// retryIdleClosed sends a request again only when its pooled connection
// was closed while idle: any other failure is the attempt's.
func retryIdleClosed(_ *fasthttp.Request, _ int, err error) (resetTimeout, retry bool) {
	var idle *idleClosedError
	return false, errors.As(err, &idle)
}
