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
type healthAgent struct {
	rivorav1connect.UnimplementedPartitionServiceHandler
	state string
	dests []string
}

func (a healthAgent) GetHealth(context.Context, *connect.Request[rivorav1.GetHealthRequest]) (*connect.Response[rivorav1.GetHealthResponse], error) {
	resp := &rivorav1.GetHealthResponse{}
	for _, d := range a.dests {
		resp.Destinations = append(resp.Destinations, &rivorav1.DestinationHealth{DestinationId: d, State: a.state})
	}
	return connect.NewResponse(resp), nil
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
		mux := http.NewServeMux()
		mux.Handle(rivorav1connect.NewPartitionServiceHandler(healthAgent{state: state, dests: []string{dest}}))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		cp.agents.connect(name, srv.URL, "", time.Time{}, time.Now())
		if _, err := cp.agents.owned(name, "", owned, nil, time.Now()); err != nil {
			t.Fatal(err)
		}
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
