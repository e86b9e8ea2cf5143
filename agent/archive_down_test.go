package agent_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/archive"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/rig"
)

// switchedArchive is a local archive that refuses every call while down,
// as an unreachable MinIO does.
type switchedArchive struct {
	*archive.Dir
	down atomic.Bool
}

var errArchiveDown = errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")

func (a *switchedArchive) Put(ctx context.Context, key string, records []*rivorav1.DeadLetter) (string, error) {
	if a.down.Load() {
		return "", errArchiveDown
	}
	return a.Dir.Put(ctx, key, records)
}

func (a *switchedArchive) List(ctx context.Context, prefix string) ([]string, error) {
	if a.down.Load() {
		return nil, fmt.Errorf("list archive %s: %w", prefix, errArchiveDown)
	}
	return a.Dir.List(ctx, prefix)
}

func (a *switchedArchive) Get(ctx context.Context, key string) ([]*rivorav1.DeadLetter, error) {
	if a.down.Load() {
		return nil, fmt.Errorf("archive %s: %w", key, errArchiveDown)
	}
	return a.Dir.Get(ctx, key)
}

// With the archive down, a dead event's `events get` says its dead letter
// is kept in the ledger, not archived yet (it read only "dead", while dlq
// list and replay failed on the archive); once the archive is back and
// the dead letter written there, it no longer does.
func TestEventsGetSaysADeadLetterWaitsForTheArchive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	local, err := archive.NewDir(filepath.Join(dir, "archive"))
	if err != nil {
		t.Fatal(err)
	}
	arch := &switchedArchive{Dir: local}
	arch.down.Store(true)
	p := newPartner(t, func(partner.Request) int { return 400 })
	ag := &running{Dev: rig.StartDev(t, dir, rig.Options{Name: agentName, Workers: 4, Agent: func(c *agent.Config) { c.Archive = arch }}), t: t}
	ag.create(destination("refusing", p.URL(), 1))
	id := ag.publish("refusing", "acme", "u1")

	dead := func(r *rivorav1.GetEventResponse) bool { return r.GetState() == rivorav1.EventState_EVENT_STATE_DEAD }
	ev := ag.waitEvent(id, "dead, its dead letter not archived", func(r *rivorav1.GetEventResponse) bool { return dead(r) && r.GetDeadLetterUnarchived() })
	if ev.GetDeadReason() != rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS {
		t.Fatalf("dead reason %s, want max attempts", ev.GetDeadReason())
	}
	if n := ag.health("refusing").GetUnarchivedDeadLetters(); n != 1 {
		t.Fatalf("health: %d unarchived dead letters, want 1", n)
	}

	arch.down.Store(false)
	ag.waitEvent(id, "dead, its dead letter archived", func(r *rivorav1.GetEventResponse) bool { return dead(r) && !r.GetDeadLetterUnarchived() })
	if _, letters := deadLetters(t, dir, "refusing"); len(letters) != 1 || letters[0].GetEvent().GetEventId() != id {
		t.Fatalf("archive holds %v, want the dead letter of %s", letters, id)
	}
}
