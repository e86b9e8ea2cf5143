package delivery

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/internal/ssrf"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

// stalledConn is a connection of an agent that stops running (SIGSTOP)
// while its request is out: the partner's answer arrives, and only then
// does the read's deadline pass, before the agent reads it.
type stalledConn struct{ *net.TCPConn }

func (c stalledConn) Read(p []byte) (int, error) {
	if err := c.waitReadable(); err != nil {
		return 0, err
	}
	if err := c.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		return 0, err
	}
	return c.TCPConn.Read(p)
}

// waitReadable waits (in the poller, not by sleeping) until bytes are
// there to read.
func (c stalledConn) waitReadable() error {
	rc, err := c.SyscallConn()
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

// A timeout whose answer was waiting unread is this agent's (it was
// stopped or starved), not the partner's: the attempt fails, but not as
// the destination's fault. A partner that never answers still times out
// as the destination's fault (TestSendTimeout).
func TestSendTimeoutWithTheAnswerUnreadIsNotTheDestinations(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	s := NewSender("ua", ssrf.New(ssrf.Loopback))
	s.plain.DialTimeout = func(addr string, timeout time.Duration) (net.Conn, error) {
		conn, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return nil, err
		}
		tcp := conn.(*net.TCPConn)
		return &trackedConn{Conn: stalledConn{tcp}, raw: newPeeker(tcp), unread: s.unread}, nil
	}
	signer, err := webhook.NewSigner("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	ev := &rivorav1.Event{EventId: "evt_1", DestinationId: "orders", CustomerId: "acme", LaneKey: "l", Payload: []byte("{}"), ContentType: "application/json"}
	res := s.Send(context.Background(), Request{Endpoint: destinations.Endpoint{URL: srv.URL, Signer: signer}, Event: ev, Attempt: 1, Timeout: 5 * time.Second})
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
