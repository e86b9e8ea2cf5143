package partitions

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/ownership"
)

// These tests drive the partition lifecycle (lifecycle.go) the way
// lockLoop, openLoop, the run goroutines and handoffs do, without NATS or
// Consul: leases come from the in-process locker, runs have no partition.

// lifecycleRig plays the loops' part. It keeps every lease and run it
// made, so a test can report about an old one (a late event).
type lifecycleRig struct {
	t      *testing.T
	ps     *lifecycle
	locker *ownership.Local
	leases map[int][]*ownership.Lease // taken, oldest first
	runs   map[int][]*partitionRun    // opened, oldest first
	// opening is the lease startOpen returned, per partition.
	opening  map[int]*ownership.Lease
	handoffs []int // partitions assign or stop handed off, in order
	released []int // partitions whose lock lockLoop gave back, in order
	// clock is the lifecycle's now; steps move it.
	clock time.Time
}

// testStallTimeout is the store stall timeout of the rig's lifecycle.
const testStallTimeout = 15 * time.Second

type step struct {
	name string
	do   func(r *lifecycleRig)
}

func newLifecycleRig(t *testing.T) *lifecycleRig {
	r := &lifecycleRig{
		t: t, ps: newLifecycle(testStallTimeout), locker: ownership.NewLocal(),
		leases: map[int][]*ownership.Lease{}, runs: map[int][]*partitionRun{}, opening: map[int]*ownership.Lease{},
		clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	r.ps.now = func() time.Time { return r.clock }
	return r
}

func (r *lifecycleRig) lease(p int) *ownership.Lease { return r.leases[p][len(r.leases[p])-1] }

func (r *lifecycleRig) take(p int) *ownership.Lease {
	lease, err := r.locker.TryAcquire(context.Background(), p)
	if err != nil {
		r.t.Fatalf("take lock %d: %v", p, err)
	}
	r.leases[p] = append(r.leases[p], lease)
	return lease
}

// ---- the loops' actions ---------------------------------------------------------

func assign(ps ...int) step {
	return step{fmt.Sprintf("assign %v", ps), func(r *lifecycleRig) {
		want := map[int]bool{}
		for _, p := range ps {
			want[p] = true
		}
		for _, run := range r.ps.assign(want) {
			r.handoffs = append(r.handoffs, run.p)
		}
	}}
}

func stop() step {
	return step{"stop", func(r *lifecycleRig) {
		for _, run := range r.ps.stop() {
			r.handoffs = append(r.handoffs, run.p)
		}
	}}
}

// lockPass is one pass of lockLoop in which every lock is free.
func lockPass() step {
	return step{"lockLoop pass", func(r *lifecycleRig) {
		releasePass().do(r)
		for _, p := range r.ps.toLock() {
			if lease := r.take(p); !r.ps.lockTaken(lease) {
				r.t.Fatalf("lockTaken(%d) refused a lock of a partition toLock listed", p)
			}
		}
	}}
}

// releasePass is a pass of lockLoop in which no lock can be taken (held
// elsewhere, or no session).
func releasePass() step {
	return step{"lockLoop pass, no lock free", func(r *lifecycleRig) {
		for _, lease := range r.ps.toRelease() {
			_ = lease.Release(context.Background())
			r.ps.lockReleased(lease)
			r.released = append(r.released, lease.P)
		}
	}}
}

// takeLock takes p's lock and reports it; want is locked's answer.
func takeLock(p int, want bool) step {
	return step{fmt.Sprintf("lock %d taken", p), func(r *lifecycleRig) {
		if got := r.ps.lockTaken(r.take(p)); got != want {
			r.t.Fatalf("lockTaken(%d) = %v, want %v", p, got, want)
		}
	}}
}

func startOpen(p int, want bool) step {
	return step{fmt.Sprintf("open %d starts", p), func(r *lifecycleRig) {
		lease, ok := r.ps.startOpen(p)
		if ok != want {
			r.t.Fatalf("startOpen(%d) = %v, want %v", p, ok, want)
		}
		if ok {
			if lease != r.lease(p) {
				r.t.Fatalf("startOpen(%d) gave lease epoch %d, want the newest, %d", p, lease.Epoch, r.lease(p).Epoch)
			}
			r.opening[p] = lease
		}
	}}
}

// opened reports that the open started last on p succeeded; want is
// whether it is to run.
func opened(p int, want bool) step {
	return step{fmt.Sprintf("open %d succeeds", p), func(r *lifecycleRig) {
		run := &partitionRun{p: p, lease: r.opening[p], cancel: func() {}, done: make(chan struct{})}
		r.runs[p] = append(r.runs[p], run)
		if got := r.ps.opened(run); got != want {
			r.t.Fatalf("opened(%d) = %v, want %v", p, got, want)
		}
	}}
}

func openFailed(p int, fenced bool) step {
	return step{fmt.Sprintf("open %d fails (fenced %v)", p, fenced), func(r *lifecycleRig) {
		r.ps.openFailed(r.opening[p], fenced)
	}}
}

// loseLock loses p's newest lease (the lock was taken away, or the
// session lost).
func loseLock(p int) step {
	return step{fmt.Sprintf("lock %d lost", p), func(r *lifecycleRig) {
		_ = r.lease(p).Release(context.Background())
	}}
}

func runFenced(p, run int) step {
	return step{fmt.Sprintf("run %d of %d fenced", run, p), func(r *lifecycleRig) { r.ps.runLost(r.runs[p][run]) }}
}

// runStalled reports that p's run number i stopped because its store took
// nothing for the stall timeout; want is whether a handoff is to start.
func runStalled(p, i int, want bool) step {
	return step{fmt.Sprintf("run %d of %d: store stalled", i, p), func(r *lifecycleRig) {
		if got := r.ps.runStalled(r.runs[p][i]); got != want {
			r.t.Fatalf("runStalled(%d) = %v, want %v", p, got, want)
		}
	}}
}

// runFailedConfirmed reports that p's run number i failed, its store's
// last confirmed write ago before now.
func runFailedConfirmed(p, i int, ago time.Duration) step {
	return step{fmt.Sprintf("run %d of %d failed, last write %s ago", i, p, ago), func(r *lifecycleRig) {
		r.ps.runFailed(r.runs[p][i], r.clock.Add(-ago))
	}}
}

func advance(d time.Duration) step {
	return step{fmt.Sprintf("%s pass", d), func(r *lifecycleRig) { r.clock = r.clock.Add(d) }}
}

// writable is one of cutLoop's checks of p's store.
func writable(p int, ok bool) step {
	return step{fmt.Sprintf("store of %d writable: %v", p, ok), func(r *lifecycleRig) { r.ps.writableCheck(p, ok) }}
}

func wantCut(ps ...int) step { return wantList("cut", (*lifecycle).cutPartitions, ps...) }

// wantBroken checks that p is reported broken with a reason containing
// why ("" = not reported).
func wantBroken(p int, why string) step {
	return step{fmt.Sprintf("%d broken: %q", p, why), func(r *lifecycleRig) {
		var got string
		for _, b := range r.ps.broken() {
			if strings.HasPrefix(b, fmt.Sprintf("partition %d ", p)) {
				got = b
			}
		}
		if (why == "") != (got == "") || !strings.Contains(got, why) {
			r.t.Fatalf("broken report of %d = %q, want one with %q", p, got, why)
		}
	}}
}

func runFailed(p, run int) step {
	return step{fmt.Sprintf("run %d of %d failed", run, p), func(r *lifecycleRig) { r.ps.runFailed(r.runs[p][run], r.ps.now()) }}
}

// handedOff ends the handoff of p's run number i: its lease is released,
// then reported.
func handedOff(p, i int) step {
	return step{fmt.Sprintf("handoff of run %d of %d ends", i, p), func(r *lifecycleRig) {
		run := r.runs[p][i]
		_ = run.lease.Release(context.Background())
		r.ps.handedOff(run)
	}}
}

// lateHandedOff reports the end of a handoff of p's run number i that is
// not handing off (nothing is released).
func lateHandedOff(p, i int) step {
	return step{fmt.Sprintf("late end of a handoff of run %d of %d", i, p), func(r *lifecycleRig) { r.ps.handedOff(r.runs[p][i]) }}
}

// lateRelease reports the release of p's lease number i (not releasing).
func lateRelease(p, i int) step {
	return step{fmt.Sprintf("late release of lease %d of %d", i, p), func(r *lifecycleRig) { r.ps.lockReleased(r.leases[p][i]) }}
}

// ---- expectations -------------------------------------------------------------

func want(p int, ph phase) step {
	return step{fmt.Sprintf("%d is %s", p, ph), func(r *lifecycleRig) {
		if got, ok := r.ps.phaseOf(p); !ok || got != ph {
			r.t.Fatalf("partition %d: phase %v (known %v), want %v", p, got, ok, ph)
		}
	}}
}

func gone(p int) step {
	return step{fmt.Sprintf("%d is forgotten", p), func(r *lifecycleRig) {
		if got, ok := r.ps.phaseOf(p); ok {
			r.t.Fatalf("partition %d: phase %v, want none", p, got)
		}
	}}
}

// holds checks that p's lock is its lease number i.
func holds(p, i int) step {
	return step{fmt.Sprintf("%d holds lease %d", p, i), func(r *lifecycleRig) {
		r.ps.mu.Lock()
		defer r.ps.mu.Unlock()
		if st := r.ps.m[p]; st == nil || st.lease != r.leases[p][i] {
			r.t.Fatalf("partition %d does not hold its lease %d", p, i)
		}
	}}
}

func wantList(what string, list func(*lifecycle) []int, ps ...int) step {
	return step{fmt.Sprintf("%s %v", what, ps), func(r *lifecycleRig) {
		if got := list(r.ps); !slices.Equal(got, ps) && len(got)+len(ps) > 0 {
			r.t.Fatalf("%s = %v, want %v", what, got, ps)
		}
	}}
}

func wantToLock(ps ...int) step { return wantList("toLock", (*lifecycle).toLock, ps...) }
func wantHeld(ps ...int) step   { return wantList("held", (*lifecycle).held, ps...) }
func wantToOpen(ps ...int) step { return wantList("toOpen", (*lifecycle).toOpen, ps...) }

func wantOwned(ps ...int) step {
	return wantList("owned", func(s *lifecycle) []int {
		var out []int
		for _, p := range s.owned() {
			out = append(out, int(p))
		}
		return out
	}, ps...)
}

func wantSettled(want bool) step {
	return step{fmt.Sprintf("settled %v", want), func(r *lifecycleRig) {
		if got := r.ps.settled(); got != want {
			r.t.Fatalf("settled = %v, want %v", got, want)
		}
	}}
}

func wantHandoffs(ps ...int) step {
	return step{fmt.Sprintf("handed off %v", ps), func(r *lifecycleRig) {
		if !slices.Equal(r.handoffs, ps) && len(r.handoffs)+len(ps) > 0 {
			r.t.Fatalf("handed off %v, want %v", r.handoffs, ps)
		}
	}}
}

func wantReleased(ps ...int) step {
	return step{fmt.Sprintf("lockLoop released %v", ps), func(r *lifecycleRig) {
		if !slices.Equal(r.released, ps) && len(r.released)+len(ps) > 0 {
			r.t.Fatalf("lockLoop released %v, want %v", r.released, ps)
		}
	}}
}

// wantAttempt checks whether an attempt on p is let through (and counts
// it done at once).
func wantAttempt(p int, want bool) step {
	return step{fmt.Sprintf("attempt on %d let through: %v", p, want), func(r *lifecycleRig) {
		run, ok := r.ps.attempting(p)
		if ok != want {
			r.t.Fatalf("attempting(%d) = %v, want %v", p, ok, want)
		}
		if ok {
			run.inFlight.Done()
		}
	}}
}

// woken checks which loops were asked to look again since the last check.
func woken(lock, open, owned bool) step {
	return step{fmt.Sprintf("woken lock %v open %v owned %v", lock, open, owned), func(r *lifecycleRig) {
		for _, c := range []struct {
			name string
			ch   chan struct{}
			want bool
		}{{"lockLoop", r.ps.wakeLock, lock}, {"openLoop", r.ps.wakeOpen, open}, {"reporter", r.ps.ownedChanged, owned}} {
			got := false
			select {
			case <-c.ch:
				got = true
			default:
			}
			if got != c.want {
				r.t.Fatalf("%s woken %v, want %v", c.name, got, c.want)
			}
		}
	}}
}

func drainWakes() step {
	return step{"(forget wakes)", func(r *lifecycleRig) {
		for _, ch := range []chan struct{}{r.ps.wakeLock, r.ps.wakeOpen, r.ps.ownedChanged} {
			select {
			case <-ch:
			default:
			}
		}
	}}
}

// runningOn brings partition p, the only one assigned, to running with
// its first lease and run.
func runningOn(p int) step {
	return step{fmt.Sprintf("%d runs", p), func(r *lifecycleRig) {
		for _, s := range []step{assign(p), lockPass(), startOpen(p, true), opened(p, true), want(p, running)} {
			s.do(r)
		}
	}}
}

func TestPartitionLifecycle(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"assigned, locked, opened: runs, reported owned from the lock on", []step{
			assign(1), want(1, assigned), wantToLock(1), wantOwned(), wantSettled(false), woken(true, true, false),
			takeLock(1, true), want(1, locked), wantOwned(1), woken(false, true, true), wantToLock(), wantToOpen(1),
			wantAttempt(1, false),
			startOpen(1, true), want(1, opening), wantOwned(1), wantToOpen(),
			opened(1, true), want(1, running), wantOwned(1), wantSettled(true), wantAttempt(1, true),
		}},
		{"held: every partition whose lock is here, opening, running or handing off, until released", []step{
			assign(1, 2, 3), wantHeld(), takeLock(1, true), takeLock(2, true), takeLock(3, true), wantHeld(1, 2, 3),
			startOpen(1, true), opened(1, true), startOpen(2, true), wantHeld(1, 2, 3),
			stop(), wantHandoffs(1), wantHeld(1, 2, 3),
			handedOff(1, 0), wantHeld(2, 3),
		}},
		{"a slow open does not hold back other locks", []step{
			assign(1), lockPass(), startOpen(1, true),
			assign(1, 2), wantToLock(2), takeLock(2, true), wantOwned(1, 2), wantToOpen(2),
			opened(1, true), startOpen(2, true), opened(2, true), wantSettled(true),
		}},
		{"lock lost while opening: given back, taken again, the late open is dropped", []step{
			assign(1), lockPass(), startOpen(1, true), loseLock(1),
			releasePass(), wantReleased(1), want(1, assigned), wantOwned(), wantToLock(1),
			lockPass(), want(1, locked), holds(1, 1),
			opened(1, false), want(1, locked), holds(1, 1), wantHandoffs(),
			startOpen(1, true), opened(1, true), want(1, running),
		}},
		{"lock lost while opening, the open reports first", []step{
			assign(1), lockPass(), startOpen(1, true), loseLock(1), drainWakes(),
			opened(1, false), want(1, releasing), wantOwned(), woken(true, false, true),
			lockPass(), wantReleased(1), want(1, locked), holds(1, 1),
		}},
		{"assignment withdrawn while opening: the lock goes back at once", []step{
			assign(1), lockPass(), startOpen(1, true),
			assign(), want(1, releasing), wantOwned(), wantSettled(true),
			lockPass(), wantReleased(1), gone(1),
			opened(1, false), gone(1), openFailed(1, false), gone(1),
		}},
		{"assignment withdrawn while locked", []step{
			assign(1), lockPass(), assign(), want(1, releasing), startOpen(1, false),
			lockPass(), wantReleased(1), gone(1), wantToLock(),
		}},
		{"assignment withdrawn before the lock: nothing to give back", []step{
			assign(1), assign(), gone(1), wantToLock(),
		}},
		{"lock taken for a partition withdrawn meanwhile is refused", []step{
			assign(1), wantToLock(1), assign(), takeLock(1, false), gone(1),
		}},
		{"assignment withdrawn while running: handoff", []step{
			runningOn(1),
			drainWakes(), assign(), want(1, handingOff), wantHandoffs(1), wantOwned(), woken(true, true, true),
			wantAttempt(1, false), wantToLock(), wantToOpen(), wantSettled(true),
			releasePass(), wantReleased(), // the handoff releases its own lock
			handedOff(1, 0), gone(1), wantHandoffs(1),
		}},
		{"re-assigned during handoff: not locked again until the handoff ends", []step{
			runningOn(1),
			assign(), assign(1), want(1, handingOff), wantToLock(), wantSettled(true), wantHandoffs(1),
			drainWakes(), handedOff(1, 0), want(1, assigned), woken(true, true, false), wantToLock(1),
			lockPass(), holds(1, 1), startOpen(1, true), opened(1, true), want(1, running),
		}},
		{"open failure: retried holding the lock", []step{
			assign(1), lockPass(), startOpen(1, true),
			openFailed(1, false), want(1, locked), holds(1, 0), wantOwned(1), wantToOpen(1),
			lockPass(), wantReleased(), holds(1, 0),
			startOpen(1, true), openFailed(1, false), startOpen(1, true), opened(1, true), want(1, running), holds(1, 0),
		}},
		{"open fenced: the lock goes back and is taken again", []step{
			assign(1), lockPass(), startOpen(1, true),
			openFailed(1, true), want(1, releasing), wantOwned(),
			lockPass(), wantReleased(1), want(1, locked), holds(1, 1),
		}},
		{"open failed after the lock was lost", []step{
			assign(1), lockPass(), startOpen(1, true), loseLock(1),
			openFailed(1, false), want(1, releasing),
		}},
		{"run failed: reopened keeping its lock", []step{
			runningOn(1),
			drainWakes(), runFailed(1, 0), want(1, locked), holds(1, 0), wantOwned(1), woken(true, true, false),
			wantToOpen(1), wantAttempt(1, false),
			startOpen(1, true), opened(1, true), want(1, running), holds(1, 0),
		}},
		{"run failed after its lock was lost: waits for a new lock", []step{
			runningOn(1),
			loseLock(1), runFailed(1, 0), want(1, assigned), wantOwned(),
			lockPass(), wantReleased(), holds(1, 1),
		}},
		{"lock lost while running: stopped, nothing released, locked again", []step{
			runningOn(1),
			loseLock(1), drainWakes(), runFenced(1, 0), want(1, assigned), wantOwned(), woken(true, true, true),
			wantAttempt(1, false), lockPass(), wantReleased(), want(1, locked), holds(1, 1),
		}},
		{"rejoin delay after a lost session", []step{
			assign(1, 2), lockPass(), startOpen(1, true), opened(1, true), startOpen(2, true), opened(2, true),
			assign(1, 2, 3), lockPass(), want(3, locked), wantOwned(1, 2, 3),
			// The session is lost: every lease with it.
			loseLock(1), loseLock(2), loseLock(3), runFenced(1, 0), runFenced(2, 0),
			releasePass(), wantReleased(3), wantToLock(1, 2, 3), wantOwned(),
			releasePass(), wantToLock(1, 2, 3), // no session yet: no lock
			// Back with a new session, the control plane assigns nothing
			// here until the rejoin delay ends.
			assign(), gone(1), gone(2), gone(3), wantToLock(), wantSettled(true), lockPass(), wantOwned(),
			assign(1, 2, 3), lockPass(), wantOwned(1, 2, 3), holds(1, 1), holds(2, 1), holds(3, 1),
		}},
		{"duplicate and late events are ignored", []step{
			runningOn(1),
			assign(1), assign(1), want(1, running), wantHandoffs(),
			runFailed(1, 0), want(1, locked),
			runFailed(1, 0), runFenced(1, 0), lateHandedOff(1, 0), want(1, locked), holds(1, 0),
			startOpen(1, true), startOpen(1, false), opened(1, true), want(1, running),
			opened(1, false), openFailed(1, true), runFenced(1, 0), lateRelease(1, 0), want(1, running),
			assign(), lateHandedOff(1, 0), want(1, handingOff), handedOff(1, 1), lateHandedOff(1, 1), gone(1),
			runFailed(1, 1), runFenced(1, 1), gone(1),
		}},
		{"store stalled while running: handed off, marked cut, taken again only once writable for the stall timeout", []step{
			runningOn(1),
			drainWakes(), runStalled(1, 0, true), want(1, handingOff), wantCut(1), wantOwned(), woken(true, true, true),
			wantAttempt(1, false), wantBroken(1, "could not be written"),
			handedOff(1, 0), want(1, assigned), wantToLock(), lockPass(), want(1, assigned), wantOwned(),
			writable(1, true), advance(testStallTimeout - time.Millisecond), writable(1, true), wantCut(1), wantToLock(),
			// A flapping link: one failed check starts the wait again.
			writable(1, false), advance(time.Second), writable(1, true), advance(testStallTimeout - time.Millisecond), writable(1, true), wantCut(1),
			drainWakes(), advance(time.Millisecond), writable(1, true), wantCut(), woken(true, false, true), wantBroken(1, ""),
			wantToLock(1), lockPass(), want(1, locked), holds(1, 1), startOpen(1, true), opened(1, true), want(1, running),
		}},
		{"a long wait for a turn to open (or a long rebuild) is not a stall: only failed opens are timed", []step{
			assign(1), lockPass(), want(1, locked), advance(2 * testStallTimeout),
			startOpen(1, true), openFailed(1, false), want(1, locked), wantCut(),
			advance(testStallTimeout - time.Millisecond), startOpen(1, true), openFailed(1, false), want(1, locked), wantCut(),
			advance(time.Millisecond), startOpen(1, true), openFailed(1, false), want(1, releasing), wantCut(1),
		}},
		{"opens failing for the stall timeout since the lock: the lock goes back, marked cut", []step{
			assign(1), lockPass(), startOpen(1, true), openFailed(1, false), want(1, locked),
			advance(testStallTimeout - time.Millisecond), startOpen(1, true), openFailed(1, false), want(1, locked), wantCut(),
			advance(time.Millisecond), startOpen(1, true), openFailed(1, false), want(1, releasing), wantCut(1), wantOwned(),
			wantBroken(1, "could not be written"),
			releasePass(), wantReleased(1), want(1, assigned), wantToLock(), takeLock(1, false),
		}},
		{"a failed run's reopens stall from its last confirmed write, not from the lock", []step{
			runningOn(1), advance(time.Hour),
			runFailedConfirmed(1, 0, time.Second), startOpen(1, true), openFailed(1, false), want(1, locked), wantCut(),
			startOpen(1, true), opened(1, true), want(1, running),
			runFailedConfirmed(1, 1, testStallTimeout), startOpen(1, true), openFailed(1, false), want(1, releasing), wantCut(1),
		}},
		{"the cut mark outlives the assignment: not handed straight back", []step{
			runningOn(1), runStalled(1, 0, true), assign(), want(1, handingOff), handedOff(1, 0), gone(1), wantCut(1),
			assign(1), want(1, assigned), wantToLock(), lockPass(), want(1, assigned),
			writable(1, true), advance(testStallTimeout), writable(1, true), wantCut(), wantToLock(1),
		}},
		{"stalled while its handoff is under way: the handoff goes on, marked cut", []step{
			runningOn(1), assign(), want(1, handingOff), wantHandoffs(1),
			runStalled(1, 0, false), want(1, handingOff), wantCut(1), handedOff(1, 0), gone(1), wantCut(1),
		}},
		{"a late stall report of an old run changes nothing", []step{
			runningOn(1), runFailed(1, 0), startOpen(1, true), opened(1, true),
			runStalled(1, 0, false), want(1, running), wantCut(),
		}},
		{"stop hands off what runs and leaves held locks to the locker", []step{
			runningOn(1), assign(1, 2, 3), takeLock(2, true),
			stop(), wantHandoffs(1), want(1, handingOff), want(2, releasing), gone(3), wantOwned(), wantSettled(true),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newLifecycleRig(t)
			for i, s := range tt.steps {
				t.Logf("%d: %s", i, s.name)
				s.do(r)
				checkInvariants(t, r.ps)
			}
		})
	}
}

// TestPartitionLifecycleRandom applies random events, timely or late, to
// three partitions and checks the invariants after each.
func TestPartitionLifecycleRandom(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		r := newLifecycleRig(t)
		pick := func() int { return rng.IntN(3) }
		anyRun := func(p int) *partitionRun {
			if len(r.runs[p]) == 0 {
				return nil
			}
			return r.runs[p][rng.IntN(len(r.runs[p]))]
		}
		actions := []func(){
			func() {
				want := map[int]bool{}
				for p := range 3 {
					want[p] = rng.IntN(2) == 0
				}
				r.ps.assign(want)
			},
			func() { releasePass().do(r) },
			func() { lockPass().do(r) },
			func() {
				if p := pick(); len(r.leases[p]) > 0 {
					_ = r.lease(p).Release(context.Background())
				}
			},
			func() {
				if lease, ok := r.ps.startOpen(pick()); ok {
					r.opening[lease.P] = lease
				}
			},
			func() {
				if p := pick(); r.opening[p] != nil {
					r.ps.openFailed(r.opening[p], rng.IntN(2) == 0)
				}
			},
			func() {
				if p := pick(); r.opening[p] != nil {
					run := &partitionRun{p: p, lease: r.opening[p], cancel: func() {}, done: make(chan struct{})}
					r.runs[p] = append(r.runs[p], run)
					r.ps.opened(run)
				}
			},
			func() {
				if run := anyRun(pick()); run != nil {
					// Fenced: its lease is lost first.
					_ = run.lease.Release(context.Background())
					r.ps.runLost(run)
				}
			},
			func() {
				if run := anyRun(pick()); run != nil {
					r.ps.runFailed(run, r.ps.now())
				}
			},
			func() {
				if run := anyRun(pick()); run != nil {
					_ = run.lease.Release(context.Background())
					r.ps.handedOff(run)
				}
			},
			func() { r.ps.stop() },
			func() { r.clock = r.clock.Add(time.Duration(rng.IntN(20)) * time.Second) },
			func() {
				if run := anyRun(pick()); run != nil && r.ps.runStalled(run) {
					r.handoffs = append(r.handoffs, run.p)
				}
			},
			func() { r.ps.writableCheck(pick(), rng.IntN(3) > 0) },
		}
		for range 300 {
			actions[rng.IntN(len(actions))]()
			checkInvariants(t, r.ps)
			if t.Failed() {
				t.Fatalf("seed %d", seed)
			}
		}
	}
}

// phaseOf returns p's phase, false if it has none.
func (ps *lifecycle) phaseOf(p int) (phase, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if st := ps.m[p]; st != nil {
		return st.phase, true
	}
	return 0, false
}

// checkInvariants verifies the invariants of partitions' doc comment.
func checkInvariants(t *testing.T, ps *lifecycle) {
	t.Helper()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for p := range ps.cut {
		if st := ps.m[p]; st != nil && isOwned(st.phase) {
			t.Errorf("partition %d marked cut but %s", p, st.phase)
		}
	}
	for p, st := range ps.m {
		hasLease := st.phase != assigned
		hasRun := st.phase == running || st.phase == handingOff
		switch {
		case (st.lease != nil) != hasLease:
			t.Errorf("partition %d %s: lease %v", p, st.phase, st.lease != nil)
		case (st.run != nil) != hasRun:
			t.Errorf("partition %d %s: run %v", p, st.phase, st.run != nil)
		case st.lease != nil && st.lease.P != p:
			t.Errorf("partition %d holds a lease of %d", p, st.lease.P)
		case st.run != nil && (st.run.lease != st.lease || st.run.p != p):
			t.Errorf("partition %d runs with another lease or partition", p)
		case (isOwned(st.phase) || st.phase == assigned) && !st.wanted:
			t.Errorf("partition %d %s but not assigned here", p, st.phase)
		}
	}
}

// The ledgers answered for are those of the partitions running here; the
// others assigned here, or whose lock is held here, are named with why
// their ledger cannot be read now, and one leaving for another agent is
// left to it.
func TestLifecycleLedgers(t *testing.T) {
	r := newLifecycleRig(t)
	for _, s := range []step{
		assign(1, 2, 4), lockPass(), startOpen(1, true), opened(1, true), startOpen(2, true),
		assign(1, 2, 3), // 4 leaves (never opened here); 3 comes, its lock not taken yet
	} {
		s.do(r)
	}
	runs, unread := r.ps.ledgers()
	if len(runs) != 1 || runs[1] == nil {
		t.Fatalf("runs %v, want partition 1's only", runs)
	}
	if len(unread) != 2 || !strings.Contains(unread[2], "its owner is opening it") || !strings.Contains(unread[3], "its lock not taken yet") {
		t.Fatalf("unread %v, want 2 opening and 3 waiting for its lock, nothing of 4", unread)
	}
}
