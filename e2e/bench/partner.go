package main

import (
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// delivery is one request a partner received.
type delivery struct {
	at     time.Time
	id     string
	dest   string // from a /d/<destination> path; "" on /hook
	lane   string // [destination/]customer/lane (the destination when the path names one)
	agent  string // from the user-agent, "" when it does not parse (kept log only)
	status int    // the answer; 0 while answering / when the agent hung up first
}

// partnerOptions shape a partner's answers.
type partnerOptions struct {
	// status picks each answer; it is called under the partner's lock, so
	// at most one call at a time. nil: 200.
	status func(now time.Time) int
	// delay holds every answer; a request whose client hangs up meanwhile
	// is not delivered.
	delay time.Duration
	// keepLog records every request (log, snapshot) and parses its
	// user-agent; without it the partner only counts.
	keepLog bool
}

// partner is the one partner endpoint of the benchmarks. It serves /hook
// and /d/<destination> and counts requests and distinct event ids
// answered 2xx; with keepLog it records every request. It verifies no
// signature: it stands for a cheap, well-behaved (or scripted) receiver.
//
// It keeps: uniq == len(firstOK); total counts every request.
type partner struct {
	srv  *http.Server
	base string // http://HOST:PORT
	url  string // base + "/hook"
	opts partnerOptions

	total atomic.Int64 // requests
	uniq  atomic.Int64 // distinct event ids answered 2xx

	mu      sync.Mutex
	log     []delivery
	firstOK map[string]time.Time // event id → first 2xx answer
	okN     map[string]int       // event id → 2xx answers (kept log only)
	badUA   []string             // first user-agents that did not parse
}

var userAgentRE = regexp.MustCompile(`^rivora/\S+ \(([^()]+)\)$`)

func startPartner(opts partnerOptions) (*partner, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &partner{base: "http://" + l.Addr().String(), opts: opts, firstOK: map[string]time.Time{}, okN: map[string]int{}}
	p.url = p.base + "/hook"
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve)}
	go p.srv.Serve(l)
	return p, nil
}

// destURL is the partner address of one destination (/d/<dest>).
func (p *partner) destURL(dest string) string { return p.base + "/d/" + dest }

func (p *partner) serve(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	d := p.received(r)
	p.total.Add(1)
	p.mu.Lock()
	d.status = http.StatusOK
	if p.opts.status != nil {
		d.status = p.opts.status(d.at)
	}
	i := -1
	if p.opts.keepLog {
		i = len(p.log)
		p.log = append(p.log, d)
		if d.agent == "" && len(p.badUA) < 5 {
			p.badUA = append(p.badUA, r.Header.Get("user-agent"))
		}
	}
	if p.opts.delay > 0 {
		if i >= 0 {
			p.log[i].status = 0 // answering
		}
		p.mu.Unlock()
		select {
		case <-time.After(p.opts.delay):
		case <-r.Context().Done():
			return // the agent hung up (killed): not delivered
		}
		p.mu.Lock()
		if i >= 0 {
			p.log[i].status = d.status
		}
	}
	if d.status/100 == 2 {
		if p.opts.keepLog {
			p.okN[d.id]++
		}
		if _, ok := p.firstOK[d.id]; !ok {
			p.firstOK[d.id] = d.at
			p.uniq.Add(1)
		}
	}
	p.mu.Unlock()
	w.WriteHeader(d.status)
}

// received reads what identifies a request: event id, lane, destination
// and (kept log only) the agent that sent it.
func (p *partner) received(r *http.Request) delivery {
	d := delivery{at: time.Now(), id: r.Header.Get("webhook-id"),
		lane: r.Header.Get("rivora-customer") + "/" + r.Header.Get("rivora-lane")}
	if dest, ok := strings.CutPrefix(r.URL.Path, "/d/"); ok {
		d.dest = dest
		d.lane = dest + "/" + d.lane
	}
	if p.opts.keepLog {
		if m := userAgentRE.FindStringSubmatch(r.Header.Get("user-agent")); m != nil {
			d.agent = m[1]
		}
	}
	return d
}

func (p *partner) close() { p.srv.Close() }

// snapshot returns the kept log.
func (p *partner) snapshot() []delivery {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.log)
}

// deliveredAt is when id was first answered 2xx.
func (p *partner) deliveredAt(id string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.firstOK[id]
	return t, ok
}
