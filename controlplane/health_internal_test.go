package controlplane

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// healthAgent is a stand-in agent answering GetHealth with one view of
// each destination, in its own state: what an agent that owns the
// destination's partition sees, or one that holds none of its lanes.
// unusable is why it cannot build each destination's config ("": it can).
type healthAgent struct {
	rivorav1connect.UnimplementedPartitionServiceHandler
	state    string
	unusable string
	dests    []string
}

func (a healthAgent) GetHealth(context.Context, *connect.Request[rivorav1.GetHealthRequest]) (*connect.Response[rivorav1.GetHealthResponse], error) {
	resp := &rivorav1.GetHealthResponse{}
	for _, d := range a.dests {
		resp.Destinations = append(resp.Destinations, &rivorav1.DestinationHealth{DestinationId: d, State: a.state, Unusable: a.unusable})
	}
	return connect.NewResponse(resp), nil
}

// startHealthAgent serves a as agent name of cp's, owning partitions owned.
func startHealthAgent(t *testing.T, cp *ControlPlane, name string, a healthAgent, owned ...uint32) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewPartitionServiceHandler(a))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	cp.agents.connect(name, srv.URL, "", time.Time{}, time.Now())
	if _, err := cp.agents.owned(name, "", owned, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// Destination health in a cell is the owner's view alone: the other
// agents see the destination idle (healthy, nothing pending), which read
// beside the owner's (degraded) as a contradiction. While the partition
// has no owner, the answer says so, as a routed call does.
func TestDestinationHealthIsTheOwnersView(t *testing.T) {
	cp, err := New(Config{StateDir: t.TempDir(), Partitions: routePartitions, Keys: testKeys(t)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	dest := destinationIn(t, 3)
	start := func(name, state string, owned ...uint32) {
		startHealthAgent(t, cp, name, healthAgent{state: state, dests: []string{dest}}, owned...)
	}
	start("a1", "healthy", 0, 1)
	start("a2", "degraded", 3)
	start("a3", "healthy", 5)

	for _, id := range []string{dest, ""} {
		health, err := cp.agents.ownersHealth(context.Background(), id, false, routePartitions)
		if err != nil || len(health) != 1 || health[0].GetState() != "degraded" {
			t.Fatalf("health of %q: %v, %v; want the owner's view alone (degraded)", id, health, err)
		}
	}

	// The owner goes; nobody has partition 3 yet.
	if _, err := cp.agents.owned("a2", "", nil, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	_, err = cp.agents.ownersHealth(context.Background(), dest, false, routePartitions)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "partition 3 has no owner right now") || !strings.Contains(err.Error(), dest) {
		t.Fatalf("health with the partition between owners: %v; want Unavailable naming partition 3 and %s", err, dest)
	}
}

// A destination's unusable config is its owner's word, as the rest of
// its health: only the owner attempts its events, so only the owner's
// unusable config holds them. Another agent's is not reported (its own
// log says it) until that agent owns the partition.
func TestUnusableIsTheOwnersWord(t *testing.T) {
	cp, err := New(Config{StateDir: t.TempDir(), Partitions: routePartitions, Keys: testKeys(t)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	dest := destinationIn(t, 3)
	startHealthAgent(t, cp, "a1", healthAgent{state: "healthy", unusable: "a1 cannot parse the key", dests: []string{dest}}, 0, 1)
	startHealthAgent(t, cp, "a2", healthAgent{state: "healthy", unusable: "", dests: []string{dest}}, 3)
	unusable := func() string {
		t.Helper()
		health, err := cp.agents.ownersHealth(context.Background(), dest, false, routePartitions)
		if err != nil || len(health) != 1 {
			t.Fatalf("health of %s: %v, %v; want the owner's view", dest, health, err)
		}
		return health[0].GetUnusable()
	}
	if got := unusable(); got != "" {
		t.Fatalf("owner can build it, another agent cannot: unusable %q, want none", got)
	}
	// a1 takes partition 3 over.
	if _, err := cp.agents.owned("a2", "", nil, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.agents.owned("a1", "", []uint32{0, 1, 3}, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := unusable(); got != "a1 cannot parse the key" {
		t.Fatalf("the owner cannot build it: unusable %q, want the owner's reason", got)
	}
}

// state ranks what holds a destination: a pause (disabled first) over
// its owner's unusable config, that over its budget's state.
func TestHealthState(t *testing.T) {
	for _, c := range []struct {
		h    *rivorav1.DestinationHealth
		want string
	}{
		{&rivorav1.DestinationHealth{BudgetState: "degraded"}, "degraded"},
		{&rivorav1.DestinationHealth{BudgetState: "parked", Unusable: "bad key"}, "unusable"},
		{&rivorav1.DestinationHealth{BudgetState: "healthy", Unusable: "bad key", Paused: true}, "paused"},
		{&rivorav1.DestinationHealth{BudgetState: "healthy", Unusable: "bad key", Paused: true, Disabled: true}, "disabled"},
	} {
		if got := healthState(c.h); got != c.want {
			t.Errorf("healthState(%v) = %q, want %q", c.h, got, c.want)
		}
	}
}
