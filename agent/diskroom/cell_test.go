package diskroom

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/testkit/poll"
)

// Each agent of a cell hears the others' pending events and sums them
// with its own; an agent that stopped saying them drops out; a report
// names only the heaviest customers, with the total of all.
func TestTheCellsPendingEvents(t *testing.T) {
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	log := slog.New(slog.DiscardHandler)
	a, err := ShareInCell(srv.Conn(), "a1", func() map[string]int { return map[string]int{"x": 10} }, log)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ShareInCell(srv.Conn(), "a2", func() map[string]int { return map[string]int{"x": 5, "flood": 100} }, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan struct{})
	go func() { b.Run(ctx); close(ran) }()
	want := map[string]int{"x": 15, "flood": 100}
	poll.True(t, "a1 hears a2's pending events", 10*time.Second, func() bool {
		got, total := a.Pending()
		return maps.Equal(got, want) && total == 115
	})
	cancel()
	<-ran
	// a2 said nothing more; what it said last ages past reportTTL (a
	// report still on its way when it stopped is aged again).
	poll.True(t, "a1 counts its own pending events alone once a2 is silent", 5*time.Second, func() bool {
		a.mu.Lock()
		for from, r := range a.others {
			r.at = r.at.Add(-reportTTL - time.Second)
			a.others[from] = r
		}
		a.mu.Unlock()
		got, total := a.Pending()
		return maps.Equal(got, map[string]int{"x": 10}) && total == 10
	})

	many := map[string]int{}
	for i := range 2 * reportedCustomers {
		many[fmt.Sprint("c", i)] = i + 1
	}
	r := report(many)
	if len(r.Customer) != reportedCustomers || r.Customer["c0"] != 0 || r.Customer[fmt.Sprint("c", 2*reportedCustomers-1)] != 2*reportedCustomers {
		t.Fatalf("a report of %d customers names %d of them (c0: %d), want the %d heaviest", len(many), len(r.Customer), r.Customer["c0"], reportedCustomers)
	}
	if want := (2 * reportedCustomers) * (2*reportedCustomers + 1) / 2; r.Total != want {
		t.Fatalf("report total %d, want %d (every customer's)", r.Total, want)
	}
}
