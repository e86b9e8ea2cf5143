package cli

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// GetDestinationHealth answers one healthy budget per destination, with
// its pause state, or the health set for it in f.health.
func (f *fakeRivora) GetDestinationHealth(_ context.Context, req *connect.Request[rivorav1.GetDestinationHealthRequest]) (*connect.Response[rivorav1.GetDestinationHealthResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.health[req.Msg.GetDestinationId()]; ok {
		return connect.NewResponse(&rivorav1.GetDestinationHealthResponse{Destinations: []*rivorav1.DestinationHealth{h}}), nil
	}
	d := f.dests[req.Msg.GetDestinationId()]
	return connect.NewResponse(&rivorav1.GetDestinationHealthResponse{Destinations: []*rivorav1.DestinationHealth{{
		DestinationId: d.GetId(), State: "healthy", Paused: d.GetPaused(), Disabled: d.GetDisabled(), PauseReason: d.GetPauseReason(),
	}}}), nil
}

// A destination disabled after a 410 reads "disabled: <reason>" in list,
// get and health, distinct from an operator's pause and from an active one.
func TestDisabledDestinationShown(t *testing.T) {
	f, url := startFake(t)
	for _, id := range []string{"crm", "orders", "billing"} {
		mustSucceed(t, run(t, url, "", "destinations", "create", id, "--url", "https://"+id+".example/h"))
	}
	f.mu.Lock()
	f.dests["orders"].Paused, f.dests["orders"].Disabled, f.dests["orders"].PauseReason = true, true, "partner answered 410 Gone"
	f.dests["billing"].Paused, f.dests["billing"].PauseReason = true, "partner maintenance"
	f.mu.Unlock()

	r := mustSucceed(t, run(t, url, "", "destinations", "list"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	want := map[string]string{"billing": "paused: partner maintenance", "crm": "active", "orders": "disabled: partner answered 410 Gone"}
	if len(lines) != 4 || !strings.HasSuffix(lines[0], "STATE") {
		t.Fatalf("list table:\n%s", r.stdout)
	}
	for _, line := range lines[1:] {
		id := strings.Fields(line)[0]
		if !strings.HasSuffix(line, want[id]) {
			t.Errorf("list row of %s ends %q, want %q", id, line, want[id])
		}
	}

	r = mustSucceed(t, run(t, url, "", "destinations", "get", "orders"))
	if !strings.Contains(r.stdout, "STATE") || !strings.Contains(r.stdout, "disabled: partner answered 410 Gone") {
		t.Fatalf("get of a disabled destination:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "destinations", "get", "orders", "-o", "json"))
	var got rivorav1.GetDestinationResponse
	if err := protojson.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("get -o json: %v\n%s", err, r.stdout)
	}
	if d := got.GetDestination(); !d.GetDisabled() || !d.GetPaused() || d.GetPauseReason() != "partner answered 410 Gone" {
		t.Fatalf("get -o json of a disabled destination: %s", r.stdout)
	}

	r = mustSucceed(t, run(t, url, "", "destinations", "health", "orders"))
	if !strings.Contains(r.stdout, "disabled: partner answered 410 Gone (budget healthy)") || !strings.Contains(r.stdout, "rivoractl destinations resume orders") {
		t.Fatalf("health of a disabled destination:\n%s", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "destinations", "health", "crm"))
	if !strings.Contains(r.stdout, "STATE") || strings.Contains(r.stdout, "disabled") || strings.Contains(r.stdout, "paused") {
		t.Fatalf("health of an active destination:\n%s", r.stdout)
	}
}
