package controlplane

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// awaitApplied returns as soon as the watching agents report the version,
// woken by their report rather than by its grace running out.
func TestAwaitAppliedWakesOnReport(t *testing.T) {
	r := assignRegistry(t)
	join(r, "a", time.Now())
	join(r, "b", time.Now())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.awaitApplied(3, time.Hour)
	}()
	for _, name := range []string{"a", "b"} {
		select {
		case <-done:
			t.Fatalf("awaitApplied returned before agent %s applied version 3", name)
		case <-time.After(20 * time.Millisecond):
		}
		if err := r.applied(name, 3, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("awaitApplied still waiting after every agent applied the version")
	}
}

// An agent that stops watching is no longer waited for.
func TestAwaitAppliedStopsWaitingForAGoneAgent(t *testing.T) {
	r := assignRegistry(t)
	join(r, "a", time.Now())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.awaitApplied(1, time.Hour)
	}()
	leave(r, "a")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("awaitApplied still waiting for an agent that left")
	}
}

// The delayed end of a gone agent's session belongs to the registry's
// run: run returns only after it ended, and nothing starts after that.
func TestDelayedSessionEndIsOwnedByRun(t *testing.T) {
	r := assignRegistry(t)
	r.deadAfter = time.Hour
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		r.run(runCtx)
	}()
	join(r, "a", time.Now())
	// The delayed work waits deadAfter or until its own context ends.
	workCtx, stopWork := context.WithCancel(context.Background())
	r.disconnect(workCtx, "a", time.Now())
	stopRun()
	select {
	case <-ran:
		t.Fatal("run returned while the delayed session end still waited")
	case <-time.After(50 * time.Millisecond):
	}
	stopWork()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after the delayed work ended")
	}
	if r.delayed.Go(func() {}) {
		t.Fatal("the registry started a goroutine after run returned")
	}
}

// The fan-out to agents asks all of them and reports every failure, in
// agent-name order whatever order the answers came in.
func TestAskAllCombinesInNameOrder(t *testing.T) {
	r := assignRegistry(t)
	for _, name := range []string{"c", "a", "d", "b"} {
		join(r, name, time.Now())
	}
	total, err := r.sum(func(a *agentState) (int64, error) {
		switch a.name {
		case "a":
			time.Sleep(20 * time.Millisecond) // answers last
			return 0, errors.New("down")
		case "c":
			return 0, errors.New("frozen")
		}
		return 10, nil
	})
	if total != 20 {
		t.Errorf("total %d, want 20 (b and d answered)", total)
	}
	if !errors.Is(err, ErrUnavailable) || err.Error() != "agent a: down\nagent c: frozen" {
		t.Errorf("error %q, want agent a's then agent c's failure, Unavailable", err)
	}
	answers, err := askAll(r, func(a *agentState) ([]*rivorav1.DestinationHealth, error) {
		if a.name == "a" {
			time.Sleep(20 * time.Millisecond)
		}
		return []*rivorav1.DestinationHealth{{DestinationId: a.name}}, nil
	})
	var got []string
	for _, h := range slices.Concat(answers...) {
		got = append(got, h.GetDestinationId())
	}
	if err != nil || !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("answers %v, %v; want a, b, c, d", got, err)
	}
}
