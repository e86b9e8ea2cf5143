package server

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"
)

// DefaultMaxInflight is --max-inflight-requests' default.
const DefaultMaxInflight = 1024

// inflightCap serves at most cap(slots) API calls at once and answers the
// next one resource_exhausted in its protocol, at once: a server that
// queued them would hold their bodies, which is what the cap bounds.
// Anything that is not an RPC (probes, metrics, the console's files)
// passes uncounted.
type inflightCap struct {
	next    http.Handler
	slots   chan struct{}
	errs    *connect.ErrorWriter
	log     *slog.Logger
	refused atomic.Int64
}

func capInflight(max int, log *slog.Logger, next http.Handler) http.Handler {
	return &inflightCap{next: next, slots: make(chan struct{}, max), errs: connect.NewErrorWriter(), log: log}
}

var errBusy = errors.New("this server is at --max-inflight-requests; retry with back-off")

func (c *inflightCap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !c.rpc(r) {
		c.next.ServeHTTP(w, r)
		return
	}
	select {
	case c.slots <- struct{}{}:
	default:
		if n := c.refused.Add(1); n == 1 || n%1000 == 0 {
			c.log.Warn("at --max-inflight-requests: refusing calls", "max_inflight_requests", cap(c.slots), "refused_so_far", n)
		}
		_ = c.errs.Write(w, r, connect.NewError(connect.CodeResourceExhausted, errBusy))
		return
	}
	defer func() { <-c.slots }()
	c.next.ServeHTTP(w, r)
}

// rpc reports an API call: a POST in one of Connect's protocols, other
// than the open health check.
func (c *inflightCap) rpc(r *http.Request) bool {
	return r.Method == http.MethodPost && c.errs.IsSupported(r) && !strings.HasPrefix(r.URL.Path, "/grpc.health.v1.Health/")
}
