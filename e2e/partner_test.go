package e2e

// The one partner endpoint of the e2e tests: an HTTP server on 127.0.0.1
// that verifies every request's signature and headers, records what it
// got, and answers as the test says (a status, a delay, or per request
// through a gate such as a WAF).

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/poll"
)

// delivery is one request a partner received.
type delivery struct {
	ID       string
	Lane     string // customer + "/" + lane key
	Customer string
	LaneKey  string
	Attempt  int
	Status   int // what the partner answered
	Payload  []byte
	At       time.Time
	Agent    string // user-agent: rivora/<version> (<agent name>)
	Resend   bool   // rivora-resend: 1 (an operator's events resend)
	Header   http.Header
}

type partner struct {
	srv *httptest.Server

	mu       sync.Mutex
	verifier *webhook.Verifier
	status   int           // answered status; 200 when healthy
	delay    time.Duration // before answering
	reqs     []delivery    // every request, in arrival order
	ok       map[string]int
	attempts map[string]int
	problems []string // bad signatures or headers
	dev      *devProc // the server delivering here, to fail fast if it dies
}

// newPartner starts a partner HTTP server on 127.0.0.1. Every request must
// carry a valid Standard Webhooks signature for the secret given with
// SetSecret and Rivora's headers; anything else is recorded as a problem and
// fails the test at cleanup.
func newPartner(t testing.TB) *partner {
	t.Helper()
	return startPartner(t, nil)
}

// newGatedPartner is newPartner whose answers are decided per request by
// gate: 0 lets the request through to the partner's normal handling (its
// status, 200 when healthy); any other value is answered as is and
// recorded (signature still verified) with that status.
func newGatedPartner(t testing.TB, gate func(now time.Time) int) *partner {
	t.Helper()
	return startPartner(t, gate)
}

// startPartner is the one partner server; gate (nil: none) is
// newGatedPartner's.
func startPartner(t testing.TB, gate func(now time.Time) int) *partner {
	t.Helper()
	p := &partner{status: http.StatusOK, ok: map[string]int{}, attempts: map[string]int{}}
	// Registered before the server's cleanup, so it runs after the server
	// closed: no request can add a problem once they are counted.
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.problems) > 0 {
			n := min(len(p.problems), 10)
			t.Errorf("partner %s saw %d bad requests, first: %s", p.URL(), len(p.problems), strings.Join(p.problems[:n], "; "))
		}
	})
	p.srv = listenLocal(t, "partner", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gate != nil {
			if code := gate(time.Now()); code != 0 {
				p.refuse(w, r, code)
				return
			}
		}
		p.serve(w, r)
	}))
	return p
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

func (p *partner) URL() string { return p.srv.URL + "/hook" }

func (p *partner) SetSecret(t testing.TB, secret string) {
	t.Helper()
	v, err := webhook.NewVerifier(secret)
	if err != nil {
		t.Fatalf("partner secret %q: %v", secret, err)
	}
	p.mu.Lock()
	p.verifier = v
	p.mu.Unlock()
}

// SetStatus makes the partner answer every request with code (200: healthy).
func (p *partner) SetStatus(code int) {
	p.mu.Lock()
	p.status = code
	p.mu.Unlock()
}

func (p *partner) SetHealthy() { p.SetStatus(http.StatusOK) }

// SetDelay makes the partner wait d before answering.
func (p *partner) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *partner) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	h := r.Header
	dv := delivery{
		ID:       h.Get(webhook.HeaderID),
		Customer: h.Get("rivora-customer"),
		LaneKey:  h.Get("rivora-lane"),
		Payload:  body,
		At:       time.Now(),
		Agent:    h.Get("user-agent"),
		Resend:   h.Get("rivora-resend") == "1",
		Header:   h.Clone(),
	}
	dv.Lane = dv.Customer + "/" + dv.LaneKey
	attempt, aerr := strconv.Atoi(h.Get("rivora-attempt"))
	dv.Attempt = attempt

	p.mu.Lock()
	var problem string
	switch {
	case r.Method != http.MethodPost:
		problem = "method " + r.Method
	case p.verifier == nil:
		problem = "request before the secret was known"
	case aerr != nil || attempt < 1:
		problem = fmt.Sprintf("rivora-attempt %q", h.Get("rivora-attempt"))
	case dv.Customer == "" || dv.LaneKey == "":
		problem = "missing rivora-customer or rivora-lane"
	case h.Get("content-type") == "":
		problem = "missing content-type"
	default:
		if err := p.verifier.Verify(h, body); err != nil {
			problem = "signature: " + err.Error()
		}
	}
	if problem != "" {
		p.problems = append(p.problems, fmt.Sprintf("%s (webhook-id %q)", problem, dv.ID))
		p.mu.Unlock()
		http.Error(w, problem, http.StatusUnauthorized)
		return
	}
	dv.Status = p.status
	delay := p.delay
	p.reqs = append(p.reqs, dv)
	p.attempts[dv.ID]++
	if dv.Status/100 == 2 {
		p.ok[dv.ID]++
	}
	p.mu.Unlock()

	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
		}
	}
	w.WriteHeader(dv.Status)
}

// Delivered reports how many distinct events were answered 2xx.
func (p *partner) Delivered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ok)
}

// Requests reports how many requests arrived in total.
func (p *partner) Requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

func (p *partner) AttemptsOf(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attempts[id]
}

func (p *partner) OKCount(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok[id]
}

func (p *partner) Snapshot() []delivery {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]delivery(nil), p.reqs...)
}

// Duplicates counts 2xx answers beyond the first per event.
func (p *partner) Duplicates() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.ok {
		n += c - 1
	}
	return n
}

// missing returns the ids not yet answered 2xx.
func (p *partner) missing(ids []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, id := range ids {
		if p.ok[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// WaitDelivered polls until every id was answered 2xx, failing the test at
// the deadline with what is missing.
func (p *partner) WaitDelivered(t testing.TB, ids []string, timeout time.Duration) {
	t.Helper()
	if err := p.waitDelivered(ids, timeout); err != nil {
		t.Fatal(err)
	}
}

func (p *partner) waitDelivered(ids []string, timeout time.Duration) error {
	var died error
	err := poll.Check(timeout, 20*time.Millisecond, func() error {
		miss := p.missing(ids)
		if len(miss) == 0 {
			return nil
		}
		p.mu.Lock()
		dev := p.dev
		p.mu.Unlock()
		if dev != nil {
			if err := dev.diedErr(); err != nil {
				died = fmt.Errorf("partner %s: %d of %d events not delivered: %w", p.URL(), len(miss), len(ids), err)
				return nil
			}
		}
		n := min(len(miss), 5)
		return fmt.Errorf("partner %s: %d of %d events not delivered within %s (requests seen: %d), e.g. %v",
			p.URL(), len(miss), len(ids), timeout, p.Requests(), miss[:n])
	})
	if died != nil {
		return died
	}
	return err
}

// refuse answers code after checking the signature, and records it.
func (p *partner) refuse(w http.ResponseWriter, r *http.Request, code int) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	h := r.Header
	dv := delivery{ID: h.Get(webhook.HeaderID), Customer: h.Get("rivora-customer"), LaneKey: h.Get("rivora-lane"),
		Payload: body, At: time.Now(), Status: code}
	dv.Lane = dv.Customer + "/" + dv.LaneKey
	dv.Attempt, _ = strconv.Atoi(h.Get("rivora-attempt"))
	p.mu.Lock()
	if p.verifier == nil {
		p.problems = append(p.problems, fmt.Sprintf("request before the secret was known (webhook-id %q)", dv.ID))
	} else if err := p.verifier.Verify(h, body); err != nil {
		p.problems = append(p.problems, fmt.Sprintf("signature: %v (webhook-id %q)", err, dv.ID))
	}
	p.reqs = append(p.reqs, dv)
	p.attempts[dv.ID]++
	p.mu.Unlock()
	w.WriteHeader(code)
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
