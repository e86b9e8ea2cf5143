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
	"github.com/rivora/rivora/testkit/poll"
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
	p := upstream.New(strings.Join([]string{follower.url, other.url, leader.url}, ","), auth.NewKeys(auth.CellToken{}), nil, nil)
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

	p = upstream.New(strings.Join([]string{follower.url, other.url, leader.url}, ","), auth.NewKeys(auth.CellToken{}), nil, nil)
	_, err = client.RecordAudit(context.Background(), connect.NewRequest(&rivorav1.RecordAuditRequest{Entry: &rivorav1.AuditEntry{Action: "lane.skip"}}))
	if !p.Failed(follower.url, err) || p.URL() != leader.url {
		t.Fatalf("after the follower's RecordAudit answer %v: following %s, want %s", err, p.URL(), leader.url)
	}

	follower.leader = "http://elsewhere:7300"
	p = upstream.New(strings.Join([]string{follower.url, other.url, leader.url}, ","), auth.NewKeys(auth.CellToken{}), nil, nil)
	_, err = client.RecordAudit(context.Background(), connect.NewRequest(&rivorav1.RecordAuditRequest{Entry: &rivorav1.AuditEntry{Action: "lane.skip"}}))
	if p.Failed(follower.url, err) || p.URL() != other.url {
		t.Fatalf("a leader the agent does not know: following %s, want the next one, %s", p.URL(), other.url)
	}
}

// An audit entry no control plane records (the leader died, the other
// is not leading yet) is recorded once a leader answers, after the
// call that made it returned; entries keep their order (a replay's end
// after its beginning).
func TestAuditRetriedUntilALeaderAnswers(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	next := startControlPlane(t)
	p := upstream.New(dead.URL+","+next.url, auth.NewKeys(auth.CellToken{}), nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = p.Run(ctx)
	}()
	defer func() { cancel(); <-ran }()

	for _, action := range []string{"deadletters.replay.began", "deadletters.replay"} {
		err := p.Audit(context.Background(), &rivorav1.AuditEntry{Action: action, DestinationId: "down"})
		if err == nil || !strings.Contains(err.Error(), "not audited yet") || !strings.Contains(err.Error(), "retrying") {
			t.Fatalf("Audit %s with no leader: %v, want that it is not audited yet and retried", action, err)
		}
	}
	time.Sleep(500 * time.Millisecond) // a few retries, refused
	if got := next.actions(); len(got) != 0 {
		t.Fatalf("recorded %v by a control plane not leading", got)
	}
	next.leads.Store(true)
	poll.True(t, "both entries recorded once a leader answers", 10*time.Second, func() bool { return len(next.actions()) == 2 })
	if got := strings.Join(next.actions(), ","); got != "deadletters.replay.began,deadletters.replay" {
		t.Fatalf("recorded %s, want the beginning, then the end", got)
	}
	if err := p.Audit(context.Background(), &rivorav1.AuditEntry{Action: "lane.skip"}); err != nil {
		t.Fatalf("Audit with a leader: %v", err)
	}
}

// Once Run has ended (the agent is stopping), nothing would retry an
// entry: Audit tries once and says it is not audited, rather than queued
// (its caller would answer success and the entry be lost unlogged); an
// entry still queued when Run ends gets one last try.
func TestAuditAfterRunEndedIsNotQueued(t *testing.T) {
	cp := startControlPlane(t)
	p := upstream.New(cp.url, auth.NewKeys(auth.CellToken{}), nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = p.Run(ctx)
	}()
	if err := p.Audit(context.Background(), &rivorav1.AuditEntry{Action: "event.resend"}); !errors.Is(err, upstream.ErrAuditQueued) {
		t.Fatalf("Audit with no leader: %v, want it queued", err)
	}
	cp.leads.Store(true) // the leader comes back as the agent stops
	cancel()
	<-ran
	if got := cp.actions(); len(got) != 1 {
		t.Fatalf("recorded %v; want the queued entry recorded by Run's last try", got)
	}
	cp.leads.Store(false)
	err := p.Audit(context.Background(), &rivorav1.AuditEntry{Action: "lane.skip"})
	if err == nil || errors.Is(err, upstream.ErrAuditQueued) || !strings.Contains(err.Error(), "the agent is stopping") {
		t.Fatalf("Audit after Run ended, with no leader: %v; want not audited, not queued", err)
	}
}
