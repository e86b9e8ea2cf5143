package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
)

// A deleted destination leaves the agent with the config push that
// deletes it: after 200 create, deliver, delete cycles no deleted
// destination is in the health (what `destinations health` and the
// console's Destinations page read: GetDestinationHealth and
// ListDestinations) nor in /metrics, while a destination kept stays in
// all three.
func TestDeletedDestinationsLeaveNoGhosts(t *testing.T) {
	const cycles = 200
	d := startDev(t, devOptions{})
	p := newPartner(t)
	ctx := ctxTimeout(t, 5*time.Minute)
	publish := func(dest string) {
		t.Helper()
		id, err := d.SDK().Publish(ctx, sdk.Event{Destination: dest, Customer: "acme", Lane: "u1", Type: "t", Payload: []byte(`{}`)})
		if err != nil {
			t.Fatalf("publish to %s: %v", dest, err)
		}
		p.WaitDelivered(t, []string{id}, 30*time.Second)
	}
	createDestination(t, d, "kept", p, "", nil)
	publish("kept")
	for i := range cycles {
		id := fmt.Sprintf("ghost-%d", i)
		createDestination(t, d, id, p, "", nil)
		publish(id)
		resp, err := d.Admin().DeleteDestination(ctx, connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: id, Force: true}))
		if err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
		waitConfigApplied(t, d, resp.Msg.GetVersion())
	}

	health, err := d.Admin().GetDestinationHealth(ctx, connect.NewRequest(&rivorav1.GetDestinationHealthRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var inHealth []string
	keptHealth := false
	for _, h := range health.Msg.GetDestinations() {
		switch id := h.GetDestinationId(); {
		case strings.HasPrefix(id, "ghost-"):
			inHealth = append(inHealth, id)
		case id == "kept":
			keptHealth = true
		}
	}
	list, err := d.Admin().ListDestinations(ctx, connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, dst := range list.Msg.GetDestinations() {
		if strings.HasPrefix(dst.GetId(), "ghost-") {
			listed = append(listed, dst.GetId())
		}
	}
	var series []string
	keptSeries := 0
	for _, line := range strings.Split(metricsText(t, d), "\n") {
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.Contains(line, `destination="ghost-`):
			series = append(series, line)
		case strings.Contains(line, `destination="kept"`):
			keptSeries++
		}
	}
	t.Logf("after %d create/delete cycles: %d deleted destinations in health, %d listed, %d /metrics series of deleted destinations; kept: in health %v, %d series",
		cycles, len(inHealth), len(listed), len(series), keptHealth, keptSeries)
	if len(inHealth) > 0 || len(listed) > 0 || len(series) > 0 {
		t.Fatalf("deleted destinations remain: %d in health (%v), %d listed, %d /metrics series (%v)", len(inHealth), inHealth[:min(len(inHealth), 3)], len(listed), len(series), series[:min(len(series), 3)])
	}
	if !keptHealth || keptSeries == 0 {
		t.Fatalf("the destination kept lost its health (%v) or its series (%d)", keptHealth, keptSeries)
	}
	// A deleted destination's history stays listed (as events get and
	// dlq list answer it); a destination never created is not found.
	if got := eventsList(t, d, "--destination", "ghost-0", "--state", "delivered"); len(got.GetEvents()) != 1 || got.GetEvents()[0].GetState() != rivorav1.EventState_EVENT_STATE_DELIVERED {
		t.Fatalf("events list of a deleted destination: %v; want its one delivered event", got)
	}
	if _, errOut, err := runCtl(d.URL(), "events", "list", "--destination", "never-created", "--state", "delivered"); err == nil || !strings.Contains(errOut, "never-created") {
		t.Fatalf("events list of a destination never created: %v, %q; want not found", err, errOut)
	}
}
