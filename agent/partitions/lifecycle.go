package partitions

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/ownership"
)

// lifecycle is the lifecycle of every partition this agent is assigned or
// holds a lock on: one explicit phase per partition, every transition in
// this file, under one mutex. It does no I/O. It decides; the loops act on
// its decisions: lockLoop takes and gives back locks, openLoop opens, a
// partition's run goroutine runs it, a handoff goroutine drains and
// releases it. Each of them reports back with the lease or run it acted
// on, so a late report (about a lease or run the partition no longer has)
// changes nothing.
//
//	         assign           lock taken          open starts          opened
//	(none) ─────────▶ assigned ─────────▶ locked ─────────▶ opening ─────────▶ running
//	                   ▲  ▲  ▲             ▲  ▲  open failed,  │                │ │ │
//	                   │  │  │             │  └── lock valid ──┘                │ │ │
//	                   │  │  │             └───── Run failed, lock valid ───────┘ │ │
//	                   │  │  └──── lock lost (fenced), or Run failed without it ──┘ │
//	                   │  │                                                          │ withdrawn
//	                   │  └── released ── releasing ◀── withdrawn or lock lost       ▼
//	                   │                                (locked, opening);      handingOff
//	                   │                                open fenced                  │
//	                   └───────────────── handed off (its lock released) ────────────┘
//
// A partition whose store cannot be written from here (store stalled: no
// write confirmed for the store stall timeout while running, or opens
// failing that long while locked) is given up the same ways: a running
// one is handed off (runStalled), a locked one released (openFailed). It
// is then marked cut: assigned here or not, it is not locked here again
// until its store has been writable from here (Writable, asked by
// cutLoop) for the stall timeout without a break, and the control plane,
// told which partitions are cut here, assigns them elsewhere meanwhile.
// The mark outlives the assignment, so a partition withdrawn from here
// is not handed straight back while this agent is still cut off.
//
// After "released" and "handed off" a partition is assigned again if it is
// wanted again meanwhile, else forgotten; withdrawn while assigned, it is
// forgotten at once. lockLoop releases the locks of releasing partitions; a
// handoff (detach, drain ≤15 s, flush) releases its own.
//
// Invariants (checkInvariants in the tests verifies them):
//   - a partition has an entry iff it is assigned here or a lock on it is
//     held or being given back here;
//   - lease != nil iff the phase is locked, opening, running, handingOff or
//     releasing; run != nil iff it is running or handingOff, and then
//     run.lease == lease;
//   - locked, opening and running imply wanted: withdrawing an assignment
//     moves the partition to releasing or handingOff in the same step;
//   - a lock is taken only in assigned, so never while a release of the same
//     partition's lock is in flight (releasing, handingOff): a late release
//     cannot give back a newer lock of the same session;
//   - only lockLoop takes locks and releases those of releasing partitions,
//     one at a time; a handoff releases its own;
//   - an attempt is counted in flight (run.inFlight) only under mu and only
//     while running, so a handoff, which leaves running under mu, waits for
//     every attempt it must;
//   - the partitions reported owned are the locked, opening and running
//     ones: their lock is held and not being given back;
//   - a partition marked cut is not locked, opening or running: no lock
//     is taken for it until the mark is gone.
type lifecycle struct {
	mu sync.Mutex
	m  map[int]*partitionState
	// cut marks the partitions given up here because their store could
	// not be written (see above), until it is writable again.
	cut map[int]*cutMark
	// stallTimeout is how long a partition may go without a confirmed
	// write before it is given up, and how long its store must be
	// writable again before it is taken again.
	stallTimeout time.Duration
	// now is the clock (time.Now; tests move it).
	now func() time.Time

	// wakeLock and wakeOpen ask lockLoop and openLoop to look again;
	// ownedChanged asks the reporter to tell the control plane.
	wakeLock     chan struct{}
	wakeOpen     chan struct{}
	ownedChanged chan struct{}
}

// phase is where a partition is in its lifecycle (see lifecycle).
type phase int

const (
	assigned   phase = iota // wanted here, no lock: lockLoop takes it
	locked                  // lock held: openLoop opens it (again, every 250 ms)
	opening                 // lock held, owner.Open under way
	running                 // open, its run goroutine works
	handingOff              // withdrawn while running: detached, draining, releasing
	releasing               // lockLoop gives back a lock that is not wanted or lost
)

func (ph phase) String() string {
	return [...]string{"assigned", "locked", "opening", "running", "handing off", "releasing"}[ph]
}

type partitionState struct {
	phase  phase
	wanted bool // the control plane assigns it here
	lease  *ownership.Lease
	run    *partitionRun
	// storeOK is when the partition's store last took a write here (or
	// answered an open): a lock held this long without it is given up.
	storeOK time.Time
	// storeConfirmed: storeOK is the store's answer (an open, a write),
	// not the lock's taking. Until then a stall is timed from the first
	// failed open (openFailing): the wait for a turn to open and a long
	// rebuild are not the store being silent.
	storeConfirmed bool
	openFailing    time.Time
	// trouble says why the partition stopped running, or that its latest
	// open failed, until it runs again: /healthz reports it. It names no
	// error: /healthz is open to all, and errors can carry paths; the
	// agent's log has them.
	trouble string
}

// partitionRun is one opened partition, from owner.Open until its Run
// goroutine ends (done).
type partitionRun struct {
	p      int
	part   *owner.Partition
	lease  *ownership.Lease
	cancel context.CancelFunc // ends Run
	done   chan struct{}      // closed when the run goroutine ends

	// inFlight counts attempts between their last ownership check and
	// their recorded outcome; a graceful handoff waits for them.
	inFlight sync.WaitGroup
}

// cutMark is a partition given up because its store could not be
// written from here.
type cutMark struct {
	since time.Time
	// writableSince is when cutLoop's checks began to find the store
	// writable without a break (zero: not writable at the last check).
	writableSince time.Time
}

const cutTrouble = "its store could not be written from here (cut off from the cell's NATS peers?); given up to another agent until it can"

func newLifecycle(stallTimeout time.Duration) *lifecycle {
	return &lifecycle{
		m: make(map[int]*partitionState), cut: make(map[int]*cutMark), stallTimeout: stallTimeout, now: time.Now,
		wakeLock: make(chan struct{}, 1), wakeOpen: make(chan struct{}, 1), ownedChanged: make(chan struct{}, 1),
	}
}

// ---- events from the control plane ---------------------------------------

// assign makes want the set of partitions assigned here. Newly assigned
// partitions wait for their lock; withdrawn ones let go of it: a running
// one is handed off (returned: the caller detaches it and runs the
// handoff), a locked or opening one is released by lockLoop.
func (ps *lifecycle) assign(want map[int]bool) (handoffs []*partitionRun) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for p := range want {
		if ps.m[p] == nil {
			ps.m[p] = &partitionState{phase: assigned}
		}
	}
	for p, st := range ps.m {
		st.wanted = want[p]
		if st.wanted {
			continue
		}
		switch st.phase {
		case assigned:
			delete(ps.m, p)
		case locked, opening:
			ps.set(st, releasing)
		case running:
			handoffs = append(handoffs, st.run)
			ps.set(st, handingOff)
		}
	}
	ps.wake(true, true)
	return handoffs
}

// stop withdraws every assignment as the agent drains, and returns the
// running partitions to hand off. Locks that are held but not running are
// left to the locker's Close.
func (ps *lifecycle) stop() (handoffs []*partitionRun) {
	return ps.assign(nil)
}

// ---- lockLoop ---------------------------------------------------------------

// toRelease moves the locked and opening partitions whose lease was lost to
// releasing, and lists the leases of every releasing partition, for
// lockLoop to give back (then lockReleased).
func (ps *lifecycle) toRelease() []*ownership.Lease {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []*ownership.Lease
	for _, st := range ps.m {
		if (st.phase == locked || st.phase == opening) && !st.lease.Valid() {
			ps.set(st, releasing)
		}
		if st.phase == releasing {
			out = append(out, st.lease)
		}
	}
	slices.SortFunc(out, func(a, b *ownership.Lease) int { return a.P - b.P })
	return out
}

// lockReleased: lockLoop gave lease back. The partition waits for a new
// lock if it is assigned here again, else it is forgotten.
func (ps *lifecycle) lockReleased(lease *ownership.Lease) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st := ps.m[lease.P]
	if st == nil || st.phase != releasing || st.lease != lease {
		return
	}
	ps.forgetOrReassign(lease.P, st)
}

// toLock lists the partitions waiting for their lock, lowest first; not
// those marked cut.
func (ps *lifecycle) toLock() []int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []int
	for p, st := range ps.m {
		if st.phase == assigned && ps.cut[p] == nil {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// lockTaken: lockLoop took lease. It reports false if the partition is no
// longer waiting for a lock (withdrawn meanwhile): give lease back.
func (ps *lifecycle) lockTaken(lease *ownership.Lease) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st := ps.m[lease.P]
	if st == nil || st.phase != assigned || ps.cut[lease.P] != nil {
		return false
	}
	st.lease = lease
	st.storeOK, st.storeConfirmed, st.openFailing = ps.now(), false, time.Time{}
	ps.set(st, locked)
	ps.wake(false, true)
	return true
}

// ---- openLoop ---------------------------------------------------------------

// toOpen lists the partitions whose lock is held and that do not run yet,
// lowest first.
func (ps *lifecycle) toOpen() []int { return ps.inPhase(locked) }

// startOpen moves a locked partition to opening and returns its lease for
// owner.Open; false if p is not locked (any more).
func (ps *lifecycle) startOpen(p int) (*ownership.Lease, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st := ps.m[p]
	if st == nil || st.phase != locked {
		return nil, false
	}
	ps.set(st, opening)
	return st.lease, true
}

// openFailed: owner.Open failed under lease. The partition keeps its lock
// and is opened again shortly (its streams may be electing leaders),
// unless the lease was lost or the open was fenced, or its store took
// nothing for the stall timeout (it is cut off: marked cut): then the
// lock goes back.
func (ps *lifecycle) openFailed(lease *ownership.Lease, fenced bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st := ps.m[lease.P]
	if st == nil || st.phase != opening || st.lease != lease {
		return
	}
	now := ps.now()
	since := st.storeOK
	if !st.storeConfirmed {
		if st.openFailing.IsZero() {
			st.openFailing = now
		}
		since = st.openFailing
	}
	stalled := !fenced && lease.Valid() && now.Sub(since) >= ps.stallTimeout
	if stalled {
		ps.markCut(lease.P, st)
	}
	if fenced || stalled || !lease.Valid() {
		ps.set(st, releasing)
		ps.wake(true, false)
		return
	}
	ps.set(st, locked)
}

// opened: owner.Open made run. It reports whether run is to run; if not
// (withdrawn or lost while it was rebuilding), the caller detaches it and
// drops it. A lease lost meanwhile goes to lockLoop to be given back.
func (ps *lifecycle) opened(run *partitionRun) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st := ps.m[run.p]
	if st == nil || st.phase != opening || st.lease != run.lease {
		return false
	}
	if !run.lease.Valid() {
		ps.set(st, releasing)
		ps.wake(true, false)
		return false
	}
	st.run = run
	st.trouble = ""
	st.storeOK, st.storeConfirmed, st.openFailing = ps.now(), true, time.Time{}
	ps.set(st, running)
	return true
}

// troubled records why partition p failed to open or stopped running;
// it is reported (broken) until the partition runs again.
func (ps *lifecycle) troubled(p int, why string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if st := ps.m[p]; st != nil && st.wanted && st.phase != running && ps.cut[p] == nil {
		st.trouble = why
	}
}

// ---- a partition's run goroutine and its handoff ----------------------------

// runLost: run stopped because its lease was lost (fenced). Nothing is
// released (the lock is gone); the partition waits for a new lock.
func (ps *lifecycle) runLost(run *partitionRun) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st := ps.m[run.p]
	if st == nil || st.phase != running || st.run != run {
		return
	}
	st.run, st.lease = nil, nil
	ps.set(st, assigned)
	ps.wake(true, true)
}

// runFailed: run stopped on an error of its own (a write failed). It is
// opened again from the store under the same lock if the lease holds,
// else it waits for a new lock. storeConfirmed is when its store last
// took a write: the stall timeout of the reopens runs from there.
func (ps *lifecycle) runFailed(run *partitionRun, storeConfirmed time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st := ps.m[run.p]
	if st == nil || st.phase != running || st.run != run {
		return
	}
	st.run = nil
	st.storeOK, st.storeConfirmed = storeConfirmed, true
	if !run.lease.Valid() {
		st.lease = nil
		ps.set(st, assigned)
	} else {
		ps.set(st, locked)
	}
	ps.wake(true, true)
}

// runStalled: run stopped because its store took no write for the stall
// timeout. It is marked cut and handed off like a withdrawn partition
// (the attempts in flight end, the lock goes back): true if the caller
// is to start that handoff, false if run is no longer running (withdrawn
// meanwhile, its handoff under way; the mark is set all the same).
func (ps *lifecycle) runStalled(run *partitionRun) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st := ps.m[run.p]
	if st == nil || st.run != run || (st.phase != running && st.phase != handingOff) {
		return false
	}
	ps.markCut(run.p, st)
	if st.phase != running {
		return false
	}
	ps.set(st, handingOff)
	ps.wake(true, true)
	return true
}

// handedOff: the handoff of run ended with its lock released.
func (ps *lifecycle) handedOff(run *partitionRun) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st := ps.m[run.p]
	if st == nil || st.phase != handingOff || st.run != run {
		return
	}
	ps.forgetOrReassign(run.p, st)
}

// ---- cutLoop --------------------------------------------------------------------

// cutPartitions lists the partitions marked cut, lowest first.
func (ps *lifecycle) cutPartitions() []int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]int, 0, len(ps.cut))
	for p := range ps.cut {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// writableCheck records whether partition p's store was writable from
// here at cutLoop's latest check. The cut mark goes once it was, without
// a break, for the stall timeout: a link that flaps does not bring the
// partition back only to stall again.
func (ps *lifecycle) writableCheck(p int, writable bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	m := ps.cut[p]
	switch {
	case m == nil:
		return
	case !writable:
		m.writableSince = time.Time{}
		return
	case m.writableSince.IsZero():
		m.writableSince = ps.now()
	}
	if ps.now().Sub(m.writableSince) < ps.stallTimeout {
		return
	}
	delete(ps.cut, p)
	if st := ps.m[p]; st != nil && st.trouble == cutTrouble {
		st.trouble = ""
	}
	signal(ps.ownedChanged)
	ps.wake(true, false)
}

// ---- queries ------------------------------------------------------------------

// run returns partition p's run while it is running, else nil.
func (ps *lifecycle) run(p int) *partitionRun {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if st := ps.m[p]; st != nil && st.phase == running {
		return st.run
	}
	return nil
}

// ledgers sorts the partitions assigned here, or whose lock is held
// here, by whether their ledger can be read now: the running ones
// (their runs), and the others with why not.
func (ps *lifecycle) ledgers() (runs map[int]*partitionRun, unread map[int]string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	runs, unread = make(map[int]*partitionRun), make(map[int]string)
	for p, st := range ps.m {
		switch {
		case st.phase == running:
			runs[p] = st.run
		case !st.wanted && !isOwned(st.phase):
			// Leaving this agent: its next owner answers for it.
		case st.trouble != "":
			unread[p] = fmt.Sprintf("its owner could not open it (%s: %s); see the agent's log", st.phase, st.trouble)
		case st.phase == assigned:
			unread[p] = "assigned here, its lock not taken yet (an earlier owner's lock-delay); retry in a moment"
		case st.phase == locked || st.phase == opening:
			unread[p] = "its owner is opening it (rebuilding from its store); retry in a moment"
		default:
			unread[p] = fmt.Sprintf("it is changing owners (%s); retry in a moment", st.phase)
		}
	}
	return runs, unread
}

// opening reports whether p is locked here but not running yet: its
// rebuild is under way, or about to be.
func (ps *lifecycle) opening(p int) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st := ps.m[p]
	return st != nil && (st.phase == locked || st.phase == opening)
}

// attempting returns partition p's run while it is running and counts an
// attempt in flight on it (call run.inFlight.Done after its outcome is
// recorded).
func (ps *lifecycle) attempting(p int) (*partitionRun, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st := ps.m[p]
	if st == nil || st.phase != running {
		return nil, false
	}
	st.run.inFlight.Add(1)
	return st.run, true
}

// settled reports whether every partition assigned here runs (or is still
// handing off an earlier run before it can be taken again).
func (ps *lifecycle) settled() bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, st := range ps.m {
		if st.wanted && st.phase != running && st.phase != handingOff {
			return false
		}
	}
	return true
}

// broken describes the partitions assigned here that do not run because
// they failed (their store did not open, or a write failed and they are
// being reopened), lowest first; empty when none is.
func (ps *lifecycle) broken() []string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var ids []int
	for p, st := range ps.m {
		if st.wanted && st.phase != running && st.trouble != "" {
			ids = append(ids, p)
		}
	}
	slices.Sort(ids)
	out := make([]string, len(ids))
	for i, p := range ids {
		out[i] = fmt.Sprintf("partition %d (%s): %s", p, ps.m[p].phase, ps.m[p].trouble)
	}
	return out
}

// owned lists the partitions whose lock this agent holds and keeps
// (locked, opening or running), for the control plane.
func (ps *lifecycle) owned() []uint32 {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []uint32
	for p, st := range ps.m {
		if isOwned(st.phase) {
			out = append(out, uint32(p))
		}
	}
	slices.Sort(out)
	return out
}

// held lists the partitions whose lock this agent holds, in any phase
// (locked, opening, running, handing off, releasing).
func (ps *lifecycle) held() []int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []int
	for p, st := range ps.m {
		if st.lease != nil {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// cutList lists the partitions marked cut, for the control plane.
func (ps *lifecycle) cutList() []uint32 {
	var out []uint32
	for _, p := range ps.cutPartitions() {
		out = append(out, uint32(p))
	}
	return out
}

// ---- helpers (mu held) --------------------------------------------------------

// markCut marks p cut (see lifecycle) and tells the reporter.
func (ps *lifecycle) markCut(p int, st *partitionState) {
	st.trouble = cutTrouble
	if ps.cut[p] == nil {
		ps.cut[p] = &cutMark{since: ps.now()}
		signal(ps.ownedChanged)
	}
}

func isOwned(ph phase) bool { return ph == locked || ph == opening || ph == running }

// set moves st to phase to, and tells the reporter if that changes what
// this agent owns.
func (ps *lifecycle) set(st *partitionState, to phase) {
	if isOwned(st.phase) != isOwned(to) {
		signal(ps.ownedChanged)
	}
	st.phase = to
}

// forgetOrReassign ends a release: the partition waits for a new lock if
// it is wanted again, else it is forgotten.
func (ps *lifecycle) forgetOrReassign(p int, st *partitionState) {
	st.lease, st.run = nil, nil
	if !st.wanted {
		delete(ps.m, p)
		return
	}
	ps.set(st, assigned)
	ps.wake(true, true)
}

func (ps *lifecycle) inPhase(ph phase) []int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []int
	for p, st := range ps.m {
		if st.phase == ph {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func (ps *lifecycle) wake(lock, open bool) {
	if lock {
		signal(ps.wakeLock)
	}
	if open {
		signal(ps.wakeOpen)
	}
}

// signal wakes a channel's reader without waiting for it.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
