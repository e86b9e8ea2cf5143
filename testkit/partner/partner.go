// Package partner is the one partner endpoint of Rivora's tests and
// benchmarks: an HTTP server on 127.0.0.1 that receives webhooks as a
// customer's partner would, and answers as the test says.
//
// Options choose what it checks and keeps: verify every request's
// Standard Webhooks signature and Rivora's headers (a bad request is a
// problem that fails the test at cleanup) or verify nothing; decide each
// answer per request (Answer: a WAF, a failing event, an outage) or answer
// one status (SetStatus); hold answers (Delay); record every request
// (Requests) or only count (CountOnly, for benchmarks at volume).
//
// It keeps: Delivered() == the number of distinct event ids answered 2xx;
// Count() counts every request, refused and problem ones too.
package partner

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/poll"
)

// Request is one request a partner received.
type Request struct {
	ID       string // webhook-id
	Customer string // rivora-customer
	LaneKey  string // rivora-lane
	Lane     string // [destination/]customer/lane key (the destination when the path names one)
	Dest     string // from a /d/<destination> path; "" on /hook
	Path     string // the request's URL path (with its query, if any)
	Attempt  int    // rivora-attempt
	Sent     int    // requests for this id so far, this one included
	// Status is the answer; 0 while a delayed answer is pending when
	// Options.HangUpLoses (and for good when the sender hung up first).
	Status    int
	At        time.Time
	UserAgent string // rivora/<version> (<agent name>)
	Agent     string // the agent name of UserAgent; "" when it does not parse
	Resend    bool   // rivora-resend: 1 (an operator's events resend)
	Payload   []byte // recorded requests only
	Header    http.Header
	Remote    string // the connection's remote address (host:port)
}

// Options shape a partner. The zero value verifies nothing, answers 200 at
// once and records every request.
type Options struct {
	// Secret makes the partner verify every request's signature with it
	// and check Rivora's headers (POST, rivora-attempt, rivora-customer,
	// rivora-lane, content-type).
	Secret string
	// Verify checks as Secret does with a secret given later (SetSecret);
	// a request before it is a problem.
	Verify bool
	// Answer decides the status of each request (0: the partner's own,
	// SetStatus, 200 unless set). It is called under the partner's lock,
	// one call at a time, with the request as received.
	Answer func(r Request) int
	// Delay holds the answers of the partner's own status (not those
	// Answer decided: a refusing gate answers at once, like a WAF).
	Delay time.Duration
	// HangUpLoses counts a delayed answer only once it is given: a request
	// whose sender hangs up meanwhile is not delivered. Without it a
	// request counts when it arrives.
	HangUpLoses bool
	// RefusalBody is written with every answer of 300 or more.
	RefusalBody string
	// CountOnly keeps no request log (Requests is empty), only counts and
	// each id's first 2xx.
	CountOnly bool
	// TLS serves https with this configuration (its certificate, and
	// ClientAuth with ClientCAs for a partner that demands a client
	// certificate); Base is then https://HOST:PORT.
	TLS *tls.Config
	// Listen is the address to listen on (default 127.0.0.1:0).
	Listen string
}

// byID is what the partner keeps per event id.
type byID struct {
	sent    int
	ok      int
	firstOK time.Time
}

// Partner is one partner endpoint; see the package doc.
type Partner struct {
	srv  *httptest.Server
	base string // http://HOST:PORT

	total atomic.Int64 // requests
	uniq  atomic.Int64 // distinct ids answered 2xx

	mu       sync.Mutex
	opts     Options
	verifier *webhook.Verifier
	status   int
	ids      map[string]*byID
	log      []Request
	problems []string
	alive    func() error
}

var userAgentRE = regexp.MustCompile(`^rivora/\S+ \(([^()]+)\)$`)

// Start starts a partner on 127.0.0.1; Close stops it.
func Start(o Options) (*Partner, error) {
	p := &Partner{opts: o, status: http.StatusOK, ids: map[string]*byID{}}
	if o.Secret != "" {
		if err := p.SetSecret(o.Secret); err != nil {
			return nil, err
		}
	}
	addr := o.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("partner listen: %w", err)
	}
	p.srv = httptest.NewUnstartedServer(p)
	p.srv.Listener.Close()
	p.srv.Listener = l
	if o.TLS != nil {
		p.srv.TLS = o.TLS
		p.srv.StartTLS()
	} else {
		p.srv.Start()
	}
	p.base = p.srv.URL
	return p, nil
}

// New is Start for a test: the partner closes when the test ends, and
// every problem it saw (a bad signature or header) fails the test then.
func New(t testing.TB, o Options) *Partner {
	t.Helper()
	p, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the server's cleanup, so it runs after the server
	// closed: no request can add a problem once they are counted.
	t.Cleanup(func() {
		if probs := p.Problems(); len(probs) > 0 {
			n := min(len(probs), 10)
			t.Errorf("partner %s saw %d bad requests, first: %s", p.URL(), len(probs), strings.Join(probs[:n], "; "))
		}
	})
	t.Cleanup(p.Close)
	return p
}

// Close closes the server and every connection to it.
func (p *Partner) Close() {
	p.srv.CloseClientConnections()
	p.srv.Close()
}

// Base is http://HOST:PORT (https with Options.TLS).
func (p *Partner) Base() string { return p.base }

// URL is the partner's webhook address, Base + "/hook".
func (p *Partner) URL() string { return p.base + "/hook" }

// DestURL is the partner address of one destination, Base + "/d/<dest>":
// its requests' Dest and Lane name it.
func (p *Partner) DestURL(dest string) string { return p.base + "/d/" + dest }

// SetSecret makes the partner verify signatures with secret from now on
// (a "whpk_" public key: v1a signatures).
func (p *Partner) SetSecret(secret string) error {
	v, err := webhook.NewVerifier(secret)
	if err != nil {
		return fmt.Errorf("partner secret %q: %w", secret, err)
	}
	p.mu.Lock()
	p.verifier = v
	p.opts.Verify = true
	p.mu.Unlock()
	return nil
}

// SetStatus makes the partner answer code where Answer leaves it the
// choice (200: healthy).
func (p *Partner) SetStatus(code int) {
	p.mu.Lock()
	p.status = code
	p.mu.Unlock()
}

// SetHealthy is SetStatus(200).
func (p *Partner) SetHealthy() { p.SetStatus(http.StatusOK) }

// SetDelay sets Options.Delay.
func (p *Partner) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.opts.Delay = d
	p.mu.Unlock()
}

// Delay is Options.Delay now.
func (p *Partner) Delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opts.Delay
}

// SetAnswer sets Options.Answer.
func (p *Partner) SetAnswer(answer func(r Request) int) {
	p.mu.Lock()
	p.opts.Answer = answer
	p.mu.Unlock()
}

// SetAlive gives WaitDelivered a check of the sender: once it returns an
// error, waiting stops with it (the server delivering here died).
func (p *Partner) SetAlive(alive func() error) {
	p.mu.Lock()
	p.alive = alive
	p.mu.Unlock()
}

func (p *Partner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	var err error
	if p.opts.CountOnly && !p.verifies() {
		_, err = io.Copy(io.Discard, r.Body)
	} else {
		body, err = io.ReadAll(r.Body)
	}
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	rq := p.received(r, body)
	p.total.Add(1)

	p.mu.Lock()
	if problem := p.check(r, rq, body); problem != "" {
		p.problems = append(p.problems, fmt.Sprintf("%s (webhook-id %q)", problem, rq.ID))
		p.mu.Unlock()
		http.Error(w, problem, http.StatusUnauthorized)
		return
	}
	st := p.ids[rq.ID]
	if st == nil {
		st = &byID{}
		p.ids[rq.ID] = st
	}
	st.sent++
	rq.Sent = st.sent
	delay := p.opts.Delay
	if p.opts.Answer != nil {
		if code := p.opts.Answer(rq); code != 0 {
			rq.Status, delay = code, 0
		}
	}
	if rq.Status == 0 {
		rq.Status = p.status
	}
	i := -1
	if !p.opts.CountOnly {
		i = len(p.log)
		p.log = append(p.log, rq)
	}
	if delay > 0 && p.opts.HangUpLoses {
		if i >= 0 {
			p.log[i].Status = 0 // answering
		}
		p.mu.Unlock()
		if !hold(r, delay) {
			return // the sender hung up: not delivered
		}
		p.mu.Lock()
		if i >= 0 {
			p.log[i].Status = rq.Status
		}
		delay = 0
	}
	p.settled(st, rq)
	p.mu.Unlock()

	if delay > 0 {
		hold(r, delay)
	}
	w.WriteHeader(rq.Status)
	if rq.Status >= 300 && p.opts.RefusalBody != "" {
		io.WriteString(w, p.opts.RefusalBody)
	}
}

// hold waits d unless the sender hangs up first (false).
func hold(r *http.Request, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-r.Context().Done():
		return false
	}
}

// settled counts an answer given; under p.mu.
func (p *Partner) settled(st *byID, rq Request) {
	if rq.Status/100 != 2 {
		return
	}
	st.ok++
	if st.ok == 1 {
		st.firstOK = rq.At
		p.uniq.Add(1)
	}
}

// received reads what identifies a request (and, unless CountOnly, what
// it carried).
func (p *Partner) received(r *http.Request, body []byte) Request {
	h := r.Header
	rq := Request{ID: h.Get(webhook.HeaderID), Customer: h.Get("rivora-customer"), LaneKey: h.Get("rivora-lane"),
		At: time.Now(), UserAgent: h.Get("user-agent"), Resend: h.Get("rivora-resend") == "1", Remote: r.RemoteAddr}
	rq.Attempt, _ = strconv.Atoi(h.Get("rivora-attempt"))
	rq.Path = r.URL.RequestURI()
	rq.Lane = rq.Customer + "/" + rq.LaneKey
	if dest, ok := strings.CutPrefix(r.URL.Path, "/d/"); ok {
		rq.Dest = dest
		rq.Lane = dest + "/" + rq.Lane
	}
	if !p.opts.CountOnly {
		if m := userAgentRE.FindStringSubmatch(rq.UserAgent); m != nil {
			rq.Agent = m[1]
		}
		rq.Payload = body
		rq.Header = h.Clone()
	}
	return rq
}

// check returns what is wrong with a request ("" when nothing is, or
// when the partner verifies nothing); under p.mu.
func (p *Partner) check(r *http.Request, rq Request, body []byte) string {
	if !p.opts.Verify && p.opts.Secret == "" {
		return ""
	}
	return p.problem(r, rq, body)
}

// verifies reports whether the partner checks requests.
func (p *Partner) verifies() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.opts.Verify || p.opts.Secret != ""
}

// problem is check's verdict on a request of a verifying partner.
func (p *Partner) problem(r *http.Request, rq Request, body []byte) string {
	h := r.Header
	switch {
	case r.Method != http.MethodPost:
		return "method " + r.Method
	case p.verifier == nil:
		return "request before the secret was known"
	case rq.Attempt < 1:
		return fmt.Sprintf("rivora-attempt %q", h.Get("rivora-attempt"))
	case rq.Customer == "" || rq.LaneKey == "":
		return "missing rivora-customer or rivora-lane"
	case h.Get("content-type") == "":
		return "missing content-type"
	}
	if err := p.verifier.Verify(h, body); err != nil {
		return "signature: " + err.Error()
	}
	return ""
}

// Problems lists the bad requests seen (verifying partners only).
func (p *Partner) Problems() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.problems)
}

// Count reports how many requests arrived in total.
func (p *Partner) Count() int { return int(p.total.Load()) }

// Delivered reports how many distinct events were answered 2xx.
func (p *Partner) Delivered() int { return int(p.uniq.Load()) }

// Requests returns the request log, in arrival order.
func (p *Partner) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

// Sent reports how many requests arrived for id.
func (p *Partner) Sent(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.ids[id]; st != nil {
		return st.sent
	}
	return 0
}

// OK reports how many times id was answered 2xx.
func (p *Partner) OK(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.ids[id]; st != nil {
		return st.ok
	}
	return 0
}

// DeliveredAt is when id was first answered 2xx.
func (p *Partner) DeliveredAt(id string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.ids[id]; st != nil && st.ok > 0 {
		return st.firstOK, true
	}
	return time.Time{}, false
}

// Duplicates counts 2xx answers beyond the first per event.
func (p *Partner) Duplicates() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, st := range p.ids {
		n += max(st.ok-1, 0)
	}
	return n
}

// Missing returns the ids of ids not yet answered 2xx.
func (p *Partner) Missing(ids []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, id := range ids {
		if st := p.ids[id]; st == nil || st.ok == 0 {
			out = append(out, id)
		}
	}
	return out
}

// DeliveredByLane lists the ids answered 2xx per lane key (rivora-lane),
// in arrival order, with repeats (delivery is at least once).
func (p *Partner) DeliveredByLane() map[string][]string {
	out := make(map[string][]string)
	for _, r := range p.Requests() {
		if r.Status/100 == 2 {
			out[r.LaneKey] = append(out[r.LaneKey], r.ID)
		}
	}
	return out
}

// WaitDelivered polls until every id was answered 2xx, failing the test at
// the deadline with what is missing.
func (p *Partner) WaitDelivered(t testing.TB, ids []string, timeout time.Duration) {
	t.Helper()
	if err := p.AwaitDelivered(ids, timeout); err != nil {
		t.Fatal(err)
	}
}

// AwaitDelivered is WaitDelivered returning its failure: what is missing
// at the deadline, or at once what SetAlive's check says.
func (p *Partner) AwaitDelivered(ids []string, timeout time.Duration) error {
	return poll.Check(timeout, 20*time.Millisecond, func() error {
		miss := p.Missing(ids)
		if len(miss) == 0 {
			return nil
		}
		p.mu.Lock()
		alive := p.alive
		p.mu.Unlock()
		if alive != nil {
			if err := alive(); err != nil {
				return poll.GiveUp(fmt.Errorf("partner %s: %d of %d events not delivered: %w", p.URL(), len(miss), len(ids), err))
			}
		}
		n := min(len(miss), 5)
		return fmt.Errorf("partner %s: %d of %d events not delivered within %s (requests seen: %d), e.g. %v",
			p.URL(), len(miss), len(ids), timeout, p.Count(), miss[:n])
	})
}

// BadUserAgents returns up to n user-agents of recorded requests that did
// not parse as rivora/<version> (<agent name>).
func (p *Partner) BadUserAgents(n int) []string {
	var out []string
	for _, r := range p.Requests() {
		if r.Agent == "" && len(out) < n {
			out = append(out, r.UserAgent)
		}
	}
	return out
}
