package delivery

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/internal/ssrf"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// lateConn is a connection of an agent that stops running (SIGSTOP)
// while its request is out: the partner's answer arrives, and the
// reading goroutine runs again only late after the read deadline passed.
// The first stallsPerAnswer reads of each answer are late (two: the agent
// is stopped again during the grace). Sleeping here is the stop being
// simulated, not a wait for an event.
type lateConn struct {
	*net.TCPConn
	late            time.Duration
	stallsPerAnswer int
	stallsLeft      int
	// deadlines are the read deadlines set on the connection, in order.
	deadlines []time.Time
}

func (c *lateConn) Write(p []byte) (int, error) {
	c.stallsLeft = c.stallsPerAnswer
	return c.TCPConn.Write(p)
}

func (c *lateConn) SetReadDeadline(t time.Time) error {
	c.deadlines = append(c.deadlines, t)
	return c.TCPConn.SetReadDeadline(t)
}

func (c *lateConn) Read(p []byte) (int, error) {
	if c.stallsLeft > 0 {
		c.stallsLeft--
		if err := waitReadable(c.TCPConn); err != nil {
			return 0, err
		}
		time.Sleep(time.Until(c.deadlines[len(c.deadlines)-1].Add(c.late)))
	}
	return c.TCPConn.Read(p)
}

// waitReadable waits (in the poller, not by sleeping) until bytes are
// there to read.
func waitReadable(conn *net.TCPConn) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var buf [1]byte
	var peekErr error
	if err := rc.Read(func(fd uintptr) bool {
		_, _, peekErr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return !errors.Is(peekErr, syscall.EAGAIN)
	}); err != nil {
		return err
	}
	return peekErr
}

// dialThrough makes s's plain connections through wrap, and returns how
// many it dialed.
func dialThrough(s *Sender, wrap func(*net.TCPConn) net.Conn) *atomic.Int32 {
	var dials atomic.Int32
	s.plain.DialTimeout = func(addr string, timeout time.Duration) (net.Conn, error) {
		conn, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return nil, err
		}
		dials.Add(1)
		tcp := conn.(*net.TCPConn)
		return &trackedConn{Conn: wrap(tcp), raw: newPeeker(tcp), unread: s.unread}, nil
	}
	return &dials
}

func unreadRequest(t *testing.T, url string, timeout time.Duration) Request {
	t.Helper()
	signer, err := webhook.NewSigner("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	ev := &rivorav1.Event{EventId: "evt_1", DestinationId: "orders", CustomerId: "acme", LaneKey: "l", Payload: []byte("{}"), ContentType: "application/json"}
	return Request{Endpoint: destinations.Endpoint{URL: url, Signer: signer}, Event: ev, Attempt: 1, Timeout: timeout}
}

// A timeout whose answer was waiting unread is this agent's (it was
// stopped or starved), not the partner's: the attempt fails, but not as
// the destination's fault. A partner that never answers still times out
// as the destination's fault (TestSendTimeout).
func TestSendTimeoutWithTheAnswerUnreadIsNotTheDestinations(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	s := NewSender("ua", ssrf.New(ssrf.Loopback))
	// Late past the deadline, and again during the answer's grace.
	dialThrough(s, func(tcp *net.TCPConn) net.Conn {
		return &lateConn{TCPConn: tcp, late: 2 * lateRead, stallsPerAnswer: 2}
	})
	res := s.Send(context.Background(), unreadRequest(t, srv.URL, 100*time.Millisecond))
	if res.OK() || !res.AnswerUnread || res.DestinationFault() {
		t.Fatalf("send whose answer was left unread past the deadline: %+v, want a failure with AnswerUnread, not the destination's fault", res)
	}
	if !strings.Contains(res.Err.Error(), "unread") {
		t.Fatalf("Err = %q, want it to say the answer was waiting unread", res.Err)
	}
	if len(s.unread.conns) != 0 {
		t.Fatalf("%d connections still recorded after the attempt took its own", len(s.unread.conns))
	}
}

// An agent that was not running when its deadline passed, with the
// partner's answer waiting, reads that answer within the grace: the
// attempt's result is the partner's real answer, and the partner is not
// sent the event again. Each answer on a connection gets its own grace.
func TestSendLateWithTheAnswerWaitingReadsIt(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 2 {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	s := NewSender("ua", ssrf.New(ssrf.Loopback))
	dials := dialThrough(s, func(tcp *net.TCPConn) net.Conn {
		return &lateConn{TCPConn: tcp, late: 2 * lateRead, stallsPerAnswer: 1}
	})
	req := unreadRequest(t, srv.URL, 100*time.Millisecond)

	res := s.Send(context.Background(), req)
	if !res.OK() || res.Status != http.StatusOK || res.AnswerUnread {
		t.Fatalf("send answered 200 at once, read late: %+v, want the 200", res)
	}
	res = s.Send(context.Background(), req)
	if res.Status != http.StatusTooManyRequests || res.RetryAfter != 7*time.Second || res.AnswerUnread || !res.DestinationFault() {
		t.Fatalf("send answered 429 Retry-After: 7 at once, read late: %+v, want the 429 with its Retry-After", res)
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("partner got %d requests, want 2 (one per attempt)", n)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d connections dialed, want 1 (the answers read, the connection kept)", n)
	}
}

// trickleConn reads a partner's trickling answer as it comes, and is
// there on time when the deadline passes with the partner's next byte
// just arrived (the runtime's timer beats the poller, as happens when a
// byte arrives as the deadline passes): its read times out on time with
// bytes waiting. Sleeping here places the deadline, it awaits no event.
type trickleConn struct {
	*net.TCPConn
	gap      time.Duration
	deadline time.Time
	// deadlines are the read deadlines set on the connection, in order.
	deadlines []time.Time
}

func (c *trickleConn) SetReadDeadline(t time.Time) error {
	c.deadline = t
	c.deadlines = append(c.deadlines, t)
	return c.TCPConn.SetReadDeadline(t)
}

func (c *trickleConn) Read(p []byte) (int, error) {
	if err := waitReadable(c.TCPConn); err != nil {
		return 0, err
	}
	if left := time.Until(c.deadline); left < c.gap {
		time.Sleep(left)
	}
	return c.TCPConn.Read(p)
}

// A partner trickling its answer across the deadline, while this agent
// runs on time, times out as the partner's fault: the bytes waiting at
// the deadline are the partner's slowness, not the agent's.
func TestSendTricklingAnswerIsTheDestinationsTimeout(t *testing.T) {
	t.Parallel()
	const gap = 20 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var requests atomic.Int32
	done := make(chan struct{})
	defer close(done)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		if _, err := http.ReadRequest(bufio.NewReader(conn)); err != nil {
			return
		}
		requests.Add(1)
		// The status line at once, then a header a byte at a time.
		if _, err := conn.Write([]byte("HTTP/1.1 200 OK\r\nX-Trickle: ")); err != nil {
			return
		}
		tick := time.NewTicker(gap)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte("a")); err != nil {
					return
				}
			}
		}
	}()
	s := NewSender("ua", ssrf.New(ssrf.Loopback))
	var conn *trickleConn
	dialThrough(s, func(tcp *net.TCPConn) net.Conn {
		conn = &trickleConn{TCPConn: tcp, gap: gap}
		return conn
	})
	res := s.Send(context.Background(), unreadRequest(t, "http://"+ln.Addr().String(), 300*time.Millisecond))
	if res.OK() || res.Status != 0 || res.AnswerUnread || !res.DestinationFault() {
		t.Fatalf("send whose answer trickled across the deadline: %+v, want a timeout that is the destination's fault", res)
	}
	if res.Err.Error() != "timeout after 300ms" {
		t.Fatalf("Err = %q, want %q", res.Err, "timeout after 300ms")
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("partner got %d requests, want 1", n)
	}
	// No grace: the answer's bytes were read as they came, so nothing
	// extends the client's deadline (a grace is a second read deadline).
	var set []time.Time
	for _, d := range conn.deadlines {
		if !d.IsZero() {
			set = append(set, d)
		}
	}
	if len(set) != 1 {
		t.Fatalf("read deadlines set: %v, want 1 (the client's, no grace)", set)
	}
	t.Logf("timed out after %v", res.Duration)
}

// An answer gets one grace, never two: an agent late at every read of
// its answer ends the attempt as AnswerUnread after the client's deadline
// and one grace, and the partner saw the request once.
func TestSendGraceExtendsARequestOnce(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1) }))
	defer srv.Close()
	s := NewSender("ua", ssrf.New(ssrf.Loopback))
	var conn *lateConn
	dialThrough(s, func(tcp *net.TCPConn) net.Conn {
		// A third late read would be read at once: a second grace would
		// end the attempt as the partner's 200.
		conn = &lateConn{TCPConn: tcp, late: 2 * lateRead, stallsPerAnswer: 3}
		return conn
	})
	const timeout = 100 * time.Millisecond
	res := s.Send(context.Background(), unreadRequest(t, srv.URL, timeout))
	if res.OK() || !res.AnswerUnread || res.DestinationFault() {
		t.Fatalf("send read late at every read: %+v, want a failure with AnswerUnread", res)
	}
	if len(conn.deadlines) != 2 {
		t.Fatalf("read deadlines set: %v, want 2 (the client's, one grace)", conn.deadlines)
	}
	if extra := conn.deadlines[1].Sub(conn.deadlines[0]); extra < 2*lateRead+answerGrace {
		t.Fatalf("the grace's deadline is %v after the client's, want at least the lateness and the grace (%v)", extra, 2*lateRead+answerGrace)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("partner got %d requests, want 1", n)
	}
}

// Over TLS too: a read deadline's timeout does not break a TLS
// connection, so the grace reads the waiting answer.
func TestSendLateWithTheAnswerWaitingReadsItOverTLS(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1) }))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	s := NewSender("ua", ssrf.New(ssrf.Loopback))
	s.secure.DialTimeout = func(addr string, timeout time.Duration) (net.Conn, error) {
		conn, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return nil, err
		}
		tcp := conn.(*net.TCPConn)
		late := &lateConn{TCPConn: tcp, late: 2 * lateRead}
		tc := tls.Client(late, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err := tc.Handshake(); err != nil {
			return nil, err
		}
		late.stallsPerAnswer = 1 // from the first request on
		return &trackedTLSConn{trackedConn{Conn: tc, raw: newPeeker(tcp), unread: s.unread}}, nil
	}
	res := s.Send(context.Background(), unreadRequest(t, srv.URL, 100*time.Millisecond))
	if !res.OK() || res.AnswerUnread {
		t.Fatalf("send over TLS answered 200 at once, read late: %+v, want the 200", res)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("partner got %d requests, want 1", n)
	}
}
