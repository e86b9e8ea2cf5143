package e2e

// The e2e tests' partners are testkit/partner's, verifying every request
// (signature and Rivora's headers) with the secret the destination was
// created with (SetSecret); listenLocal serves what is not a partner (a
// front, an operator webhook, an OTLP receiver).

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/rivora/rivora/testkit/partner"
)

// newPartner starts a partner HTTP server on 127.0.0.1. Every request must
// carry a valid Standard Webhooks signature for the secret given with
// SetSecret and Rivora's headers; anything else is recorded as a problem and
// fails the test at cleanup.
func newPartner(t testing.TB) *partner.Partner {
	t.Helper()
	return partner.New(t, partner.Options{Verify: true})
}

// newGatedPartner is newPartner whose answers are decided per request by
// gate: 0 lets the request through to the partner's normal handling (its
// status, 200 when healthy); any other value is answered as is and
// recorded (signature still verified) with that status.
func newGatedPartner(t testing.TB, gate func(now time.Time) int) *partner.Partner {
	t.Helper()
	return partner.New(t, partner.Options{Verify: true, Answer: func(r partner.Request) int { return gate(r.At) }})
}

// listenLocal starts an HTTP server for h on 127.0.0.1; it is closed when
// the test ends.
func listenLocal(t testing.TB, what string, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("%s listen: %v", what, err)
	}
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// waf answers 429 once more than limit requests arrived in the current
// fixed one-second window (every arrival counts, refused ones too), like a
// partner's web application firewall.
type waf struct {
	limit int
	mu    sync.Mutex
	start time.Time
	win   int64
	count int
}

func newWAF(limit int) *waf { return &waf{limit: limit, start: time.Now()} }

func (w *waf) gate(now time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	win := int64(now.Sub(w.start) / time.Second)
	if win != w.win {
		w.win, w.count = win, 0
	}
	w.count++
	if w.count > w.limit {
		return http.StatusTooManyRequests
	}
	return 0
}
