package server

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/auth"
)

// DefaultMaxInflight is --max-inflight-requests' default.
const DefaultMaxInflight = 1024

// inflightCap serves at most cap(slots) API calls at once and answers the
// next one resource_exhausted in its protocol, at once: a server that
// queued them would hold their bodies, which is what the cap bounds.
// Anything that is not an RPC (probes, metrics, the console's files)
// passes uncounted.
//
// One caller (one token, auth.Caller) may not take the last quarter of
// the slots while it holds half of them or more: a caller flooding the
// server with calls is refused first, and the others still find slots.
// Calls without a token (a server without tokens) are one caller held to
// no share.
type inflightCap struct {
	next    http.Handler
	slots   chan struct{}
	errs    *connect.ErrorWriter
	log     *slog.Logger
	refused atomic.Int64

	mu sync.Mutex
	// byCaller counts the slots each caller holds (no entry: none).
	byCaller map[string]int
}

func capInflight(max int, log *slog.Logger, next http.Handler) http.Handler {
	return &inflightCap{next: next, slots: make(chan struct{}, max), errs: connect.NewErrorWriter(), log: log, byCaller: map[string]int{}}
}

var (
	errBusy       = errors.New("this server is at --max-inflight-requests; retry with back-off")
	errCallerBusy = errors.New("this caller holds half of this server's --max-inflight-requests and three quarters are taken; the rest is kept for other callers: retry with back-off, or make fewer calls at once")
)

func (c *inflightCap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !c.rpc(r) {
		c.next.ServeHTTP(w, r)
		return
	}
	caller := auth.Caller(r.Header.Get("Authorization"))
	if !c.takeShare(caller) {
		c.refuse(w, r, errCallerBusy)
		return
	}
	defer c.dropShare(caller)
	select {
	case c.slots <- struct{}{}:
	default:
		c.refuse(w, r, errBusy)
		return
	}
	defer func() { <-c.slots }()
	c.next.ServeHTTP(w, r)
}

func (c *inflightCap) refuse(w http.ResponseWriter, r *http.Request, err error) {
	if n := c.refused.Add(1); n == 1 || n%1000 == 0 {
		c.log.Warn("at --max-inflight-requests: refusing calls", "max_inflight_requests", cap(c.slots), "refused_so_far", n, "why", err.Error())
	}
	_ = c.errs.Write(w, r, connect.NewError(connect.CodeResourceExhausted, err))
}

// takeShare counts a call of caller's, unless caller holds half the slots
// or more while three quarters are taken.
func (c *inflightCap) takeShare(caller string) bool {
	if caller == "" {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.byCaller[caller]
	if 2*n >= cap(c.slots) && 4*len(c.slots) >= 3*cap(c.slots) {
		return false
	}
	c.byCaller[caller] = n + 1
	return true
}

func (c *inflightCap) dropShare(caller string) {
	if caller == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.byCaller[caller]; n > 1 {
		c.byCaller[caller] = n - 1
	} else {
		delete(c.byCaller, caller)
	}
}

// rpc reports an API call: a POST in one of Connect's protocols, other
// than the open health check.
func (c *inflightCap) rpc(r *http.Request) bool {
	return r.Method == http.MethodPost && c.errs.IsSupported(r) && !strings.HasPrefix(r.URL.Path, "/grpc.health.v1.Health/")
}
