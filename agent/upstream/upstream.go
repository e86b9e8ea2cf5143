// Package upstream is the agent's way to the control plane: which of
// several control planes it follows now (the one that leads), clients for
// the agent's own calls with the cell token, and the audit entries of the
// operator actions the agent carries out. It owns the choice of control
// plane and the audit entries not recorded yet; its Run retries those.
package upstream

import (
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// Planes are the control planes an agent follows.
type Planes struct {
	urls      []string
	keys      *auth.Keys
	transport http.RoundTripper
	// index picks the followed control plane among several.
	index  atomic.Uint32
	log    *slog.Logger
	audits *audits
}

// New follows the control planes of urls ("url,url,…"), calling them with
// keys' cell token through transport (nil = http.DefaultTransport); log
// (nil: none) tells of audit entries that could not be recorded.
func New(urls string, keys *auth.Keys, transport http.RoundTripper, log *slog.Logger) *Planes {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Planes{urls: split(urls), keys: keys, transport: transport, log: log, audits: newAudits()}
}

// split splits a comma-separated URL list ("url,url,…").
func split(urls string) []string {
	var out []string
	for _, u := range strings.Split(urls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		return []string{""}
	}
	return out
}

// Count is how many control planes there are.
func (p *Planes) Count() int { return len(p.urls) }

// URL is the control plane the agent follows now.
func (p *Planes) URL() string {
	return p.urls[int(p.index.Load())%len(p.urls)]
}

// Next moves on from failed, unless another caller did already.
func (p *Planes) Next(failed string) {
	i := p.index.Load()
	if p.urls[int(i)%len(p.urls)] == failed {
		p.index.CompareAndSwap(i, i+1)
	}
}

// Failed moves on from failed after a call to it failed with err: to the
// leader err names (a follower's answer, errkind.Leader), when it is one
// of the control planes, else to the next one (unless another caller did
// already). It reports whether it moved to a named leader, which may be
// called at once: waiting before it only delays a failover.
func (p *Planes) Failed(failed string, err error) (toLeader bool) {
	if leader := strings.TrimRight(errkind.Leader(err), "/"); leader != "" {
		for i, u := range p.urls {
			if strings.TrimRight(u, "/") == leader && u != failed {
				p.index.Store(uint32(i))
				return true
			}
		}
	}
	p.Next(failed)
	return false
}

// HTTPClient is a client for calls to the control plane, through the
// transport; timeout 0 is none (streams).
func (p *Planes) HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Transport: p.transport, Timeout: timeout}
}

// Client is a client of the control plane at url for the agent's own
// calls, which the cell token opens.
func (p *Planes) Client(httpClient *http.Client, url string) rivorav1connect.AgentServiceClient {
	return rivorav1connect.NewAgentServiceClient(httpClient, url, connect.WithInterceptors(auth.Bearer(p.keys.Cell().String())))
}
