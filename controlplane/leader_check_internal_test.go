package controlplane

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/rivora/rivora/internal/errkind"
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

// A follower that knows the leader names it in a detail (agents connect
// to it at once) and tells a person to send the call there: retrying the
// follower never succeeds.
func TestCheckNamesTheLeader(t *testing.T) {
	e := newElection(nil, "http://cp2", slog.New(slog.DiscardHandler), nil)
	e.setLeader("http://cp3")
	err := asConnect(e.check())
	if got := errkind.Leader(err); got != "http://cp3" {
		t.Fatalf("leader in the detail of %v = %q, want http://cp3", err, got)
	}
	if !strings.Contains(err.Error(), "--server http://cp3") {
		t.Fatalf("check = %v, want it to say to use --server http://cp3", err)
	}
	e.setLeader("")
	if got := errkind.Leader(asConnect(e.check())); got != "" {
		t.Fatalf("no leader known, yet the detail names %q", got)
	}
}
