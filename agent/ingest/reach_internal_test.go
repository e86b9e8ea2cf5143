package ingest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rivora/rivora/agent/natsd"
)

// A check whose answer comes after its request finished refuses nothing:
// the request is not counted as refused, and the guard does not turn
// suspicious on its word. A refusal while the request runs is counted
// once, and says the event may be stored.
func TestARefusalAfterTheRequestFinishedCountsNothing(t *testing.T) {
	g := &storeGuard{reach: &natsd.Reach{}, log: slog.New(slog.DiscardHandler)}
	cut := errors.New("stream INGEST: no quorum of its replicas within reach")
	before := testutil.ToFloat64(unreachableRefusals)

	finished := g.watch(context.Background())
	finished.timer.Stop() // its checks would ask this Reach, which has no server
	finished.stop()
	if got := finished.refuse(cut, true); got != nil {
		t.Fatalf("a finished request was refused: %v", got)
	}
	if got := testutil.ToFloat64(unreachableRefusals) - before; got != 0 {
		t.Fatalf("a finished request counted %v refusals", got)
	}
	if g.suspectUntil.Load() != 0 {
		t.Fatal("the guard turned suspicious on a finished request's check")
	}

	running := g.watch(context.Background())
	running.timer.Stop() // its checks would ask this Reach, which has no server
	refusal := running.refuse(cut, true)
	running.stop()
	if refusal == nil || !strings.Contains(refusal.Error(), "events may have been stored") {
		t.Fatalf("a running request's refusal: %v, want one saying the event may have been stored", refusal)
	}
	if got := testutil.ToFloat64(unreachableRefusals) - before; got != 1 {
		t.Fatalf("a running request's refusal counted %v times, want once", got)
	}
	if g.suspectUntil.Load() == 0 {
		t.Fatal("the guard is not suspicious after a refusal")
	}
}
