package controlplane_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/e2e/consultest"
	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// consulCP is one control plane of several sharing a Consul.
type consulCP struct {
	t      *testing.T
	url    string
	admin  rivorav1connect.AdminServiceClient
	agents rivorav1connect.AgentServiceClient
	srv    *httptest.Server
	cancel context.CancelFunc
	done   chan error
}

// leaderTestCell is the cell token of the control planes of these tests.
var leaderTestCell = auth.CellTokenOf("leader-test-cell-token-0123456789abcdef")

// adminTokenDirs holds, per Consul, the directory where the first leader
// writes the bootstrap admin token: every control plane of a test shares
// it, so whichever leads first writes it and the clients read it.
var adminTokenDirs sync.Map

// fileBearer sends the token in path (read at each call: it appears once
// a leader is elected).
func fileBearer(path string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if token, err := os.ReadFile(path); err == nil {
				req.Header().Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
			}
			return next(ctx, req)
		}
	}))
}

func startConsulCP(t *testing.T, consulURL, limitsPath string) *consulCP {
	t.Helper()
	dir, _ := adminTokenDirs.LoadOrStore(consulURL, t.TempDir())
	adminPath := filepath.Join(dir.(string), "admin.token")
	mux := http.NewServeMux()
	n := &consulCP{t: t, srv: httptest.NewServer(mux), done: make(chan error, 1)}
	n.url = n.srv.URL
	log := rig.Logger(t, n.url)
	cp, err := controlplane.New(controlplane.Config{
		ConsulURL: consulURL, AdvertiseURL: n.url, LimitsPath: limitsPath, Partitions: 4, Keys: auth.NewKeys(leaderTestCell), AdminTokenPath: adminPath,
	}, log)
	if err != nil {
		n.srv.Close()
		t.Fatalf("controlplane.New: %v", err)
	}
	cp.Handle(mux)
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- cp.Run(ctx) }()
	n.admin = rivorav1connect.NewAdminServiceClient(n.srv.Client(), n.url, fileBearer(adminPath))
	n.agents = rivorav1connect.NewAgentServiceClient(n.srv.Client(), n.url, connect.WithInterceptors(auth.Bearer(leaderTestCell.String())))
	t.Cleanup(n.stop)
	return n
}

// stop ends Run (which gives the lock up) and then the HTTP server.
func (n *consulCP) stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.cancel = nil
	select {
	case err := <-n.done:
		if err != nil {
			n.t.Errorf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		n.t.Errorf("Run did not return 15s after its context ended")
	}
	n.srv.Close()
}

// awaitLeader waits until exactly one of nodes serves and every other one
// answers Unavailable naming it. Two serving at once fails the test.
func awaitLeader(t *testing.T, nodes ...*consulCP) *consulCP {
	t.Helper()
	var leader *consulCP
	poll.True(t, "exactly one leader, named by the others", 15*time.Second, func() bool {
		leader = nil
		errs := map[*consulCP]error{}
		for _, n := range nodes {
			_, err := n.admin.GetConfigStatus(context.Background(), connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
			switch {
			case err == nil && leader != nil:
				t.Fatalf("%s and %s both serve", leader.url, n.url)
			case err == nil:
				leader = n
			case connect.CodeOf(err) != connect.CodeUnavailable:
				t.Fatalf("%s: GetConfigStatus: %v, want success or Unavailable", n.url, err)
			default:
				errs[n] = err
			}
		}
		if leader == nil {
			return false
		}
		for _, err := range errs {
			if !strings.Contains(err.Error(), "not the leader; the leader is "+leader.url) {
				return false
			}
		}
		return true
	})
	return leader
}

func TestLeaderElection(t *testing.T) {
	srv := consultest.Start(t)
	client := consulClient(t, srv)
	limits := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(limits, []byte("defaults:\n  rate_per_second: 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := startConsulCP(t, srv.URL(), limits), startConsulCP(t, srv.URL(), limits)
	leader := awaitLeader(t, a, b)
	follower := map[*consulCP]*consulCP{a: b, b: a}[leader]
	ctx := context.Background()

	pair, _, err := client.KV().Get(controlplane.ConsulLeaderKey, nil)
	if err != nil || pair == nil || string(pair.Value) != leader.url || pair.Session == "" {
		t.Fatalf("leader key: %+v, %v; want held, valued %s", pair, err, leader.url)
	}

	// The follower refuses writes, reads and agents alike, naming the leader.
	_, err = follower.admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "orders", Url: "https://example.com/hook"}))
	wantCode(t, "follower CreateDestination", err, connect.CodeUnavailable, "not the leader", leader.url)
	_, err = follower.admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{}))
	wantCode(t, "follower ListAudit", err, connect.CodeUnavailable, leader.url)
	stream, err := follower.agents.Watch(ctx, connect.NewRequest(&rivorav1.WatchRequest{AgentName: "a1", Address: "http://127.0.0.1:1"}))
	if err == nil {
		for stream.Receive() {
			t.Fatalf("follower Watch sent %v", stream.Msg())
		}
		err = stream.Err()
		stream.Close()
	}
	wantCode(t, "follower Watch", err, connect.CodeUnavailable, leader.url)
	_, err = follower.agents.ReportApplied(ctx, connect.NewRequest(&rivorav1.ReportAppliedRequest{AgentName: "a1", Version: 1}))
	wantCode(t, "follower ReportApplied", err, connect.CodeUnavailable, leader.url)
	_, err = follower.agents.ReportOwned(ctx, connect.NewRequest(&rivorav1.ReportOwnedRequest{AgentName: "a1"}))
	wantCode(t, "follower ReportOwned", err, connect.CodeUnavailable, leader.url)

	created, err := leader.admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "orders", Url: "https://example.com/hook", Author: "alice"}))
	if err != nil {
		t.Fatalf("leader CreateDestination: %v", err)
	}
	version := created.Msg.GetVersion()

	// The leader stops: the follower takes over with the state.
	leader.stop()
	if pair, _, err := client.KV().Get(controlplane.ConsulLeaderKey, nil); err != nil || (pair != nil && pair.Session != "" && string(pair.Value) == leader.url) {
		t.Fatalf("leader key after the leader stopped: %+v, %v; want it released", pair, err)
	}
	awaitLeader(t, follower)
	status, err := follower.admin.GetConfigStatus(ctx, connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil || status.Msg.GetVersion() != version {
		t.Fatalf("new leader's config version: %v, %v; want %d", status, err, version)
	}
	list, err := follower.admin.ListDestinations(ctx, connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil || len(list.Msg.GetDestinations()) != 1 || list.Msg.GetDestinations()[0].GetUrl() != "https://example.com/hook" {
		t.Fatalf("new leader's ListDestinations: %v, %v", list, err)
	}
	audit, err := follower.admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var sawCreate, sawLoad bool
	for _, e := range audit.Msg.GetEntries() {
		sawCreate = sawCreate || (e.GetAction() == "destination.create" && e.GetDestinationId() == "orders" && e.GetAuthor() == controlplane.BootstrapTokenName) // the token's name, not the request's author
		sawLoad = sawLoad || (e.GetAction() == "limits.load" && strings.Contains(e.GetDetail(), follower.url))
	}
	if !sawCreate || !sawLoad {
		t.Fatalf("new leader's audit log %v: want the old leader's create and its own limits.load", audit.Msg.GetEntries())
	}
	next, err := follower.admin.PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: "orders", Reason: "test"}))
	if err != nil || next.Msg.GetVersion() != version+1 {
		t.Fatalf("new leader's first change: %v, %v; want version %d", next, err, version+1)
	}
}

// A leader whose session Consul ends (here: destroyed by an operator) stops
// leading at once, ends its agents' Watch streams, and a leader is elected
// again with the state intact.
func TestLeaderLosesSession(t *testing.T) {
	srv := consultest.Start(t)
	client := consulClient(t, srv)
	a, b := startConsulCP(t, srv.URL(), ""), startConsulCP(t, srv.URL(), "")
	leader := awaitLeader(t, a, b)
	ctx := context.Background()
	created, err := leader.admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "orders", Url: "https://example.com/hook"}))
	if err != nil {
		t.Fatal(err)
	}

	stream, err := leader.agents.Watch(ctx, connect.NewRequest(&rivorav1.WatchRequest{AgentName: "a1", Address: "http://127.0.0.1:1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("Watch on the leader: %v", stream.Err())
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for stream.Receive() {
		}
	}()

	pair, _, err := client.KV().Get(controlplane.ConsulLeaderKey, nil)
	if err != nil || pair == nil || pair.Session == "" {
		t.Fatalf("leader key: %+v, %v", pair, err)
	}
	if _, err := client.Session().Destroy(pair.Session, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the deposed leader's Watch stream is still open 10s after its session ended")
	}
	now := awaitLeader(t, a, b)
	status, err := now.admin.GetConfigStatus(ctx, connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil || status.Msg.GetVersion() != created.Msg.GetVersion() {
		t.Fatalf("config version after re-election: %v, %v; want %d", status, err, created.Msg.GetVersion())
	}
	if pair2, _, err := client.KV().Get(controlplane.ConsulLeaderKey, nil); err != nil || pair2 == nil || pair2.Session == pair.Session || string(pair2.Value) != now.url {
		t.Fatalf("leader key after re-election: %+v, %v", pair2, err)
	}
}

// Consul restarting (its data kept) costs no leader: writes fail
// Unavailable while it is down and work again once it is back.
func TestLeaderSurvivesConsulRestart(t *testing.T) {
	srv := consultest.Start(t)
	a, b := startConsulCP(t, srv.URL(), ""), startConsulCP(t, srv.URL(), "")
	leader := awaitLeader(t, a, b)
	ctx := context.Background()
	if _, err := leader.admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "before", Url: "https://example.com/1"})); err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	_, err := leader.admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "during", Url: "https://example.com/2"}))
	wantCode(t, "CreateDestination while Consul is down", err, connect.CodeUnavailable)
	srv.Start()

	leader = awaitLeader(t, a, b)
	var created *connect.Response[rivorav1.CreateDestinationResponse]
	poll.True(t, "a write after Consul restarted", 15*time.Second, func() bool {
		created, err = leader.admin.CreateDestination(ctx, connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "after", Url: "https://example.com/3"}))
		return err == nil
	})
	list, err := leader.admin.ListDestinations(ctx, connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil || destIDs(list.Msg.GetDestinations()) != "after,before" || created.Msg.GetVersion() != 3 {
		t.Fatalf("after the restart: %v, %v (create version %d); want after,before at version 3 (1 is the bootstrap token)", list, err, created.Msg.GetVersion())
	}
}
