package upstream_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent/upstream"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// controlPlane is a control plane's AgentService as the agent sees it: a
// follower naming leader (when set), or a leader recording audit entries
// once it leads.
type controlPlane struct {
	rivorav1connect.UnimplementedAgentServiceHandler
	url    string
	leader string // a follower names it
	leads  atomic.Bool

	mu       sync.Mutex
	recorded []*rivorav1.AuditEntry
}

func startControlPlane(t *testing.T) *controlPlane {
	cp := &controlPlane{}
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewAgentServiceHandler(cp))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	cp.url = srv.URL
	return cp
}

// gate is a control plane's leader check, as the agent reads it.
func (c *controlPlane) gate() error {
	if c.leads.Load() {
		return nil
	}
	if c.leader == "" {
		return connect.NewError(connect.CodeUnavailable, errors.New("not the leader; no leader yet, retry shortly"))
	}
	return errkind.AsConnect(errkind.WithInfo(errkind.Errorf(errkind.Unavailable, "not the leader; the leader is %s", c.leader), errkind.NotLeaderReason, map[string]string{"leader": c.leader}))
}

func (c *controlPlane) Watch(context.Context, *connect.Request[rivorav1.WatchRequest], *connect.ServerStream[rivorav1.WatchResponse]) error {
	return c.gate()
}

func (c *controlPlane) RecordAudit(_ context.Context, req *connect.Request[rivorav1.RecordAuditRequest]) (*connect.Response[rivorav1.RecordAuditResponse], error) {
	if err := c.gate(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recorded = append(c.recorded, req.Msg.GetEntry())
	return connect.NewResponse(&rivorav1.RecordAuditResponse{}), nil
}

func (c *controlPlane) actions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.recorded {
		out = append(out, e.GetAction())
	}
	return out
}

// A follower's refusal, on a stream or a unary call, moves the agent to
// the leader it names, past the other control planes; one that names no
// leader (or one the agent does not know) moves it to the next.
func TestFailedGoesToTheNamedLeader(t *testing.T) {
	follower, other, leader := startControlPlane(t), startControlPlane(t), startControlPlane(t)
	follower.leader = leader.url + "/"
	p := upstream.New(strings.Join([]string{follower.url, other.url, leader.url}, ","), auth.NewKeys(auth.CellToken{}), nil)
	client := p.Client(p.HTTPClient(5*time.Second), follower.url)

	stream, err := client.Watch(context.Background(), connect.NewRequest(&rivorav1.WatchRequest{AgentName: "a1"}))
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
	}
	if !p.Failed(follower.url, err) || p.URL() != leader.url {
		t.Fatalf("after the follower's Watch answer %v: following %s, want the leader it names, %s", err, p.URL(), leader.url)
	}

	p = upstream.New(strings.Join([]string{follower.url, other.url, leader.url}, ","), auth.NewKeys(auth.CellToken{}), nil)
	_, err = client.RecordAudit(context.Background(), connect.NewRequest(&rivorav1.RecordAuditRequest{Entry: &rivorav1.AuditEntry{Action: "lane.skip"}}))
	if !p.Failed(follower.url, err) || p.URL() != leader.url {
		t.Fatalf("after the follower's RecordAudit answer %v: following %s, want %s", err, p.URL(), leader.url)
	}

	follower.leader = "http://elsewhere:7300"
	p = upstream.New(strings.Join([]string{follower.url, other.url, leader.url}, ","), auth.NewKeys(auth.CellToken{}), nil)
	_, err = client.RecordAudit(context.Background(), connect.NewRequest(&rivorav1.RecordAuditRequest{Entry: &rivorav1.AuditEntry{Action: "lane.skip"}}))
	if p.Failed(follower.url, err) || p.URL() != other.url {
		t.Fatalf("a leader the agent does not know: following %s, want the next one, %s", p.URL(), other.url)
	}
}
