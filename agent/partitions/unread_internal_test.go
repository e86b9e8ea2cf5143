package partitions

import (
	"slices"
	"testing"
)

// Asked directly, an agent of a cell names the partitions it does not
// hold as unread (it named only its own, and the CLI then spoke of "the
// dead letters still waiting in the agents' ledgers"), with no agent: the
// control plane leaves them to their holder's answer.
func TestUnreadLedgersNameThePartitionsNotHeldHere(t *testing.T) {
	got := unreadLedgers("a1", 8, []uint32{0, 1, 3}, map[int]string{2: "its owner is opening it"})
	if len(got) != 2 {
		t.Fatalf("unread %v, want 2 (opening) and 4-7 (not held here)", got)
	}
	if u := got[0]; u.GetAgent() != "a1" || !slices.Equal(u.GetPartitions(), []uint32{2}) || u.GetReason() != "its owner is opening it" {
		t.Errorf("first unread %v, want partition 2 of a1, opening", u)
	}
	if u := got[1]; u.GetAgent() != "" || !slices.Equal(u.GetPartitions(), []uint32{4, 5, 6, 7}) || u.GetReason() != notHeldHere {
		t.Errorf("second unread %v, want 4-7, not held here, no agent", u)
	}
	if got := unreadLedgers("dev", 4, []uint32{0, 1, 2, 3}, nil); len(got) != 0 {
		t.Errorf("an agent holding every partition: unread %v, want none", got)
	}
}
