package controlplane

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/controlplane/notices"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// switchAgent is a stand-in agent whose view of its destinations the test
// changes.
type switchAgent struct {
	rivorav1connect.UnimplementedPartitionServiceHandler
	mu     sync.Mutex
	states map[string]string // by destination
	dests  []string
}

// set sets the state of the agent's view of dests (all: none named).
func (a *switchAgent) set(state string, dests ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(dests) == 0 {
		dests = a.dests
	}
	for _, d := range dests {
		a.states[d] = state
	}
}

func (a *switchAgent) GetHealth(context.Context, *connect.Request[rivorav1.GetHealthRequest]) (*connect.Response[rivorav1.GetHealthResponse], error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	resp := &rivorav1.GetHealthResponse{}
	for _, d := range a.dests {
		h := &rivorav1.DestinationHealth{DestinationId: d, State: a.states[d]}
		if h.State == "parked" {
			h.LastTransition = &rivorav1.HealthTransition{At: timestamppb.New(time.Now().Add(-time.Hour)), From: "degraded", To: "parked", Cause: "HTTP 503"}
		}
		resp.Destinations = append(resp.Destinations, h)
	}
	return connect.NewResponse(resp), nil
}

// A parked destination's episode ends on its owner's word alone: not
// while its partition has no owner (the other agents see it idle), nor
// while its new owner rebuilds it (it answers "opening"); the cell probe
// got destination.recovered at every failover, without a single 2xx.
func TestNoRecoveryNoticeWhileAPartitionMoves(t *testing.T) {
	cp, err := New(Config{StateDir: t.TempDir(), Partitions: routePartitions, Keys: testKeys(t)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	dest, other := destinationIn(t, 3), destinationIn(t, 5)
	for _, id := range []string{dest, other} {
		if _, _, err := cp.createDestination(&rivorav1.CreateDestinationRequest{Id: id, Url: "https://example.com/hook"}, systemActor, everything); err != nil {
			t.Fatal(err)
		}
	}
	agents := map[string]*switchAgent{}
	for _, name := range []string{"a1", "a2"} {
		a := &switchAgent{states: map[string]string{dest: "healthy", other: "healthy"}, dests: []string{dest, other}}
		agents[name] = a
		mux := http.NewServeMux()
		mux.Handle(rivorav1connect.NewPartitionServiceHandler(a))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		cp.agents.connect(name, srv.URL, "", time.Time{}, time.Now())
	}
	own := func(name string, partitions ...uint32) {
		t.Helper()
		if _, err := cp.agents.owned(name, "", partitions, nil, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	n := newNotifier(cp, "", "", time.Millisecond)
	n.scan = notices.NewScan(time.Now().Add(-time.Hour), time.Minute, time.Hour)
	types := func() []string {
		n.mu.Lock()
		defer n.mu.Unlock()
		var out []string
		for _, nt := range n.queue {
			out = append(out, nt.Type)
		}
		return out
	}

	own("a1", 0, 1, 5)
	own("a2", 3)
	agents["a2"].set("parked", dest)
	n.pollHealth(context.Background())
	if got := types(); len(got) != 1 || got[0] != notices.DestinationParked {
		t.Fatalf("notices %v, want one %s", got, notices.DestinationParked)
	}

	own("a2") // a2 gave partition 3 up (its view is idle now); nobody owns it yet
	agents["a2"].set("healthy")
	n.pollHealth(context.Background())
	agents["a1"].set("opening", dest)
	own("a1", 0, 1, 3, 5) // a1 took it and rebuilds it
	n.pollHealth(context.Background())
	if got := types(); len(got) != 1 {
		t.Fatalf("notices %v while the partition moved, want none new", got)
	}
	// Another partition's destination is judged meanwhile.
	agents["a1"].set("parked", other)
	n.pollHealth(context.Background())
	if got := types(); len(got) != 2 || got[1] != notices.DestinationParked {
		t.Fatalf("notices %v, want the other partition's destination parked meanwhile", got)
	}
	agents["a1"].set("healthy", other)
	_, err = cp.agents.ownersHealth(context.Background(), dest, false, routePartitions)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "partition 3 is opening") {
		t.Fatalf("health while the new owner rebuilds: %v; want Unavailable, partition 3 opening", err)
	}

	agents["a1"].set("healthy", dest) // rebuilt, and a delivery got through
	n.pollHealth(context.Background())
	if got := types(); len(got) != 4 || got[2] != notices.DestinationRecovered || got[3] != notices.DestinationRecovered {
		t.Fatalf("notices %v, want both recovered", got)
	}
}
