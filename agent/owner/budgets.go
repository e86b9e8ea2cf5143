package owner

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
)

// saveBudgetsEvery spaces the budget keeper's writes: a budget that moves
// many times a second (a 429 storm extending its hold) is written once.
const saveBudgetsEvery = time.Second

// budgetKeeper keeps the budgets of the partition's destinations in its
// ledger (lanes.BudgetSubject, the latest record of each) when they
// change, so that the partition's next owner — this agent after a
// restart, or another one after a failover — takes up a Retry-After hold
// and a degraded or parked destination where they were, instead of
// meeting a throttling partner at the full rate. The rebuild reads them
// back (rebuildState.budgetEntry). A budget saved late is lost at a kill
// -9 for at most saveBudgetsEvery; a clean stop saves what changed.
type budgetKeeper struct {
	p     int
	fence *fence
	// ledger is the partition's ledger (a deleted destination's record
	// is purged from it).
	ledger jetstream.Stream
	sched  *scheduler.Scheduler
	log    *slog.Logger

	mu sync.Mutex
	// unsaved: the latest state of each budget not written yet;
	// forgotten: deleted destinations whose record is to be purged.
	unsaved   map[string]scheduler.SavedBudget
	forgotten map[string]bool
	warnedAt  time.Time
}

func newBudgetKeeper(p int, f *fence, ledger jetstream.Stream, sched *scheduler.Scheduler, log *slog.Logger) *budgetKeeper {
	return &budgetKeeper{p: p, fence: f, ledger: ledger, sched: sched, log: log,
		unsaved: make(map[string]scheduler.SavedBudget), forgotten: make(map[string]bool)}
}

func (k *budgetKeeper) run(ctx context.Context) error {
	t := time.NewTicker(saveBudgetsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// A clean stop or handoff: what changed since the last tick
			// (Detach collected it before the scheduler forgot the
			// partition).
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
			defer cancel()
			k.collect()
			k.save(sctx)
			return nil
		case <-t.C:
		}
		k.collect()
		k.save(ctx)
	}
}

// collect takes the budgets that changed from the scheduler.
func (k *budgetKeeper) collect() {
	changed := k.sched.ChangedBudgets(k.p)
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range changed {
		k.unsaved[c.Destination] = c
	}
}

// forget drops a deleted destination's record: a destination made again
// under its name starts afresh.
func (k *budgetKeeper) forget(destination string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.unsaved, destination)
	k.forgotten[destination] = true
}

// save writes what is unsaved; what fails is tried again at the next tick.
func (k *budgetKeeper) save(ctx context.Context) {
	k.mu.Lock()
	unsaved, forgotten := k.unsaved, k.forgotten
	k.unsaved, k.forgotten = make(map[string]scheduler.SavedBudget), make(map[string]bool)
	k.mu.Unlock()
	var failed error
	// Purges first: a destination deleted and made again under its name
	// within one tick has the new one's record in unsaved, which a purge
	// after it would erase (and which waits, if the purge failed, for the
	// purge's next try).
	for dest := range forgotten {
		err := k.ledger.Purge(ctx, jetstream.WithPurgeSubject(lanes.BudgetSubject(k.p, dest)))
		if err != nil {
			failed = err
			k.mu.Lock()
			k.forgotten[dest] = true
			if s, ok := unsaved[dest]; ok {
				if _, newer := k.unsaved[dest]; !newer {
					k.unsaved[dest] = s
				}
				delete(unsaved, dest)
			}
			k.mu.Unlock()
		}
	}
	for dest, s := range unsaved {
		if err := k.write(ctx, dest, s); err != nil {
			failed = err
			k.mu.Lock()
			if _, newer := k.unsaved[dest]; !newer {
				k.unsaved[dest] = s
			}
			k.mu.Unlock()
		}
	}
	if failed != nil && !errors.Is(failed, ErrFenced) && ctx.Err() == nil && time.Since(k.warnedAt) > time.Minute {
		k.warnedAt = time.Now()
		k.log.Warn("saving destination budgets to the ledger failed; retrying", "error", failed)
	}
}

func (k *budgetKeeper) write(ctx context.Context, destination string, s scheduler.SavedBudget) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	subject := lanes.BudgetSubject(k.p, destination)
	msg := nats.NewMsg(subject)
	msg.Data = data
	ack, err := k.fence.publish(ctx, msg)
	if err != nil {
		return err
	}
	// The older records go once this one is stored, and only while this
	// owner still holds the partition. Not by a rollup: a fenced-off
	// owner's late write would erase the current owner's record before a
	// rebuild could compare their epochs (the rebuild keeps the last
	// record its epoch filter admits).
	if err := k.fence.check(); err != nil {
		return err
	}
	return k.ledger.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(ack.Sequence))
}

// budgetEntry is a budget record of the ledger: the scheduler takes it
// up at install. A record that does not decode is skipped (the
// destination starts at its configured rate, as before budgets were
// saved), never the rebuild's failure.
func (r *rebuildState) budgetEntry(destination string, data []byte) {
	var s scheduler.SavedBudget
	if err := json.Unmarshal(data, &s); err != nil {
		r.o.log.Warn("ignoring a destination budget record that does not decode", "destination", destination, "error", err)
		return
	}
	r.budgets[destination] = s
}
