package controlplane

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// An edge is connected while its last report said the link was up and is
// at most edgeStaleAfter old; watching while a stream is open and it was
// seen within edgeStaleAfter.
func TestEdgeRegistryConnectedAndWatching(t *testing.T) {
	r := newEdgeRegistry()
	t0 := time.Unix(1_700_000_000, 0)
	registered := []*rivorav1.Edge{{Name: "a"}, {Name: "b"}}
	status := func(now time.Time) (a, b *rivorav1.EdgeStatus) {
		s := r.status(registered, now)
		return s[0], s[1]
	}

	if a, b := status(t0); a.GetConnected() || a.GetWatching() || a.GetLastSeen() != nil || b.GetName() != "b" {
		t.Fatalf("before any call: %v, %v", a, b)
	}
	_, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := r.watch("a", "", cancel, t0)
	r.report("a", &rivorav1.EdgeBuffer{CellConnected: true, BufferedEvents: 3}, t0)
	r.report("b", &rivorav1.EdgeBuffer{CellConnected: false}, t0)
	a, b := status(t0.Add(edgeStaleAfter))
	if !a.GetConnected() || !a.GetWatching() || a.GetBuffer().GetBufferedEvents() != 3 || !a.GetLastSeen().AsTime().Equal(t0) {
		t.Fatalf("a reported connected %v ago: %v", edgeStaleAfter, a)
	}
	if b.GetConnected() || b.GetWatching() {
		t.Fatalf("b reported its link down: %v", b)
	}
	if a.GetReportStale() || b.GetReportStale() {
		t.Fatalf("reports %v old taken for stale: %v, %v", edgeStaleAfter, a, b)
	}
	if a, _ := status(t0.Add(edgeStaleAfter + time.Millisecond)); a.GetConnected() || a.GetWatching() || !a.GetReportStale() {
		t.Fatalf("a's report is stale after %v, yet it counts as connected or watching (its stream may be cut off silently), or is not said stale: %v", edgeStaleAfter, a)
	}
	done(t0.Add(time.Second))
	if a, _ := status(t0.Add(time.Second)); a.GetWatching() || !a.GetConnected() || !a.GetLastSeen().AsTime().Equal(t0.Add(time.Second)) {
		t.Fatalf("a's watch ended: %v; want not watching, still connected by its report", a)
	}
	if edgeStaleAfter != 3*EdgeReportInterval {
		t.Fatalf("staleness %v, want three report intervals", edgeStaleAfter)
	}
}

// forget ends the removed edge's open watches.
func TestEdgeRegistryForgetEndsWatches(t *testing.T) {
	r := newEdgeRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := r.watch("a", "", cancel, time.Now())
	r.forget("a")
	if ctx.Err() == nil {
		t.Fatal("forget left the edge's watch open")
	}
	done(time.Now()) // the stream's end after its edge is gone changes nothing
	if s := r.status([]*rivorav1.Edge{{Name: "a"}}, time.Now()); s[0].GetWatching() || s[0].GetLastSeen() != nil {
		t.Fatalf("a forgotten edge has state: %v", s[0])
	}
}

// One edge process holds a name at a time: another is refused, naming
// the name and what to do, while the holder's last call is at most
// edgeStaleAfter old; after that the next one takes it and the holder's
// watches end. The holder's calls renew it; an empty instance (an edge
// from before instances) is never refused and holds nothing.
func TestEdgeNameClaim(t *testing.T) {
	r := newEdgeRegistry()
	t0 := time.Unix(1_700_000_000, 0)
	mustClaim := func(instance string, at time.Time, wantTook string) {
		t.Helper()
		if took, _, err := r.claim("lyon", instance, at); err != nil || took != wantTook {
			t.Fatalf("claim by %s at +%v: took %q, %v; want it held, taken from %q", instance, at.Sub(t0), took, err, wantTook)
		}
	}
	refused := func(instance string, at time.Time, wantFirst bool) {
		t.Helper()
		_, first, err := r.claim("lyon", instance, at)
		if first != wantFirst {
			t.Fatalf("claim by %s at +%v: first refusal in a row %t, want %t (logged once)", instance, at.Sub(t0), first, wantFirst)
		}
		md, ok := errkind.Info(errkind.AsConnect(err), errkind.EdgeNameInUseReason)
		if connect.CodeOf(errkind.AsConnect(err)) != connect.CodeAlreadyExists || !ok || md["edge"] != "lyon" {
			t.Fatalf("claim by %s at +%v: %v; want already_exists, reason %s naming lyon", instance, at.Sub(t0), err, errkind.EdgeNameInUseReason)
		}
		for _, want := range []string{`edge name "lyon" is in use by another running edge`, "another --name", "stop the other one"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("the refusal %q does not say %q", err, want)
			}
		}
	}

	mustClaim("A", t0, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.watch("lyon", "A", cancel, t0)
	refused("B", t0.Add(time.Second), true)
	mustClaim("", t0.Add(time.Second), "") // takes no part
	mustClaim("A", t0.Add(edgeStaleAfter), "")
	refused("B", t0.Add(2*edgeStaleAfter), false) // A's renewal counts
	if ctx.Err() != nil {
		t.Fatal("a refused claim ended the holder's watch")
	}
	mustClaim("B", t0.Add(2*edgeStaleAfter+time.Millisecond), "A")
	if ctx.Err() == nil {
		t.Fatal("the name was taken from A, yet A's watch is still open")
	}
	refused("A", t0.Add(2*edgeStaleAfter+time.Second), true)
	if _, _, err := r.claim("oslo", "A", t0); err != nil {
		t.Fatalf("another name: %v", err)
	}
}

// The refusal and the audit entry count an edge's unforwarded events in
// words: "1 unforwarded event", not "1 unforwarded events".
func TestUnforwardedEvents(t *testing.T) {
	for _, tc := range []struct {
		events, bytes uint64
		want          string
	}{
		{1, 310, "1 unforwarded event (310 bytes)"},
		{7, 700, "7 unforwarded events (700 bytes)"},
	} {
		if got := unforwardedEvents(tc.events, tc.bytes); got != tc.want {
			t.Errorf("unforwardedEvents(%d, %d) = %q, want %q", tc.events, tc.bytes, got, tc.want)
		}
	}
}
