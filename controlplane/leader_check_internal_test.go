package controlplane

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// A control plane that won the lock but could not lead says so, rather
// than naming the last leader it saw (a probe was sent to a dead one);
// once another leads, it names that one.
func TestCheckSaysWhyItCannotLead(t *testing.T) {
	e := newElection(nil, "http://cp2", slog.New(slog.DiscardHandler), nil)
	e.cannotLead = errors.New("this cell was made with 8 partitions, not 16")
	if err := e.check(); err == nil || !strings.Contains(err.Error(), "cannot lead") || !strings.Contains(err.Error(), "8 partitions") {
		t.Fatalf("check = %v, want it to say why it cannot lead", err)
	}
	e.setLeader("http://cp3")
	if err := e.check(); err == nil || !strings.Contains(err.Error(), "the leader is http://cp3") {
		t.Fatalf("check = %v, want it to name the new leader", err)
	}
	// That leader gone, the old reason is not given again: it may have
	// passed (another could lead meanwhile).
	e.setLeader("")
	if err := e.check(); err == nil || strings.Contains(err.Error(), "cannot lead") {
		t.Fatalf("check = %v, want no stale reason", err)
	}
}
