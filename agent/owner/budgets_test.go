package owner_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rivora/rivora/agent/budget"
	"github.com/rivora/rivora/agent/limits"
	"github.com/rivora/rivora/agent/owner"
	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
)

// writeBudget writes a budget record for orders stamped with epoch, as an
// owner holding that epoch would.
func (c *fenceCell) writeBudget(s budget.Saved, epoch uint64) {
	c.t.Helper()
	data, err := json.Marshal(scheduler.SavedBudget{Saved: s})
	if err != nil {
		c.t.Fatal(err)
	}
	msg := nats.NewMsg(lanes.BudgetSubject(c.p, "orders"))
	msg.Data = data
	msg.Header.Set(owner.EpochHeader, strconv.FormatUint(epoch, 10))
	if _, err := c.js.PublishMsg(context.Background(), msg); err != nil {
		c.t.Fatal(err)
	}
}

// The rebuild takes up the last budget record of the current epoch: a
// fenced-off owner's late record does not replace it, and one that does
// not decode is skipped, not the rebuild's failure.
func TestRebuildRestoresTheCurrentOwnersBudget(t *testing.T) {
	c := startFenceCell(t)
	lease := c.acquire()
	if _, _, err := c.open(lease); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	held := budget.Saved{State: budget.Degraded, Rate: 7, HoldUntil: now.Add(10 * time.Minute), At: now,
		Last: budget.Transition{At: now, From: budget.Healthy, To: budget.Degraded, Cause: "HTTP 429"}}
	c.writeBudget(budget.Saved{State: budget.Degraded, Rate: 3, At: now.Add(-time.Minute)}, lease.Epoch)
	c.writeBudget(held, lease.Epoch)
	c.writeBudget(budget.Saved{State: budget.Healthy, Rate: 100, At: now}, lease.Epoch-1) // a stale owner's, later
	bad := nats.NewMsg(lanes.BudgetSubject(c.p, "other"))
	bad.Data = []byte("{not json")
	bad.Header.Set(owner.EpochHeader, strconv.FormatUint(lease.Epoch, 10))
	if _, err := c.js.PublishMsg(context.Background(), bad); err != nil {
		t.Fatal(err)
	}

	_, sched, err := c.open(lease)
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	sched.SetLimits("orders", c.p, limits.Limits{RatePerSecond: 100, Burst: 100, MaxInFlight: 4})
	snap := sched.Snapshot("orders")[0]
	if snap.State != budget.Degraded || snap.CurrentRate != 7 || !snap.HoldUntil.Equal(held.HoldUntil) {
		t.Fatalf("restored %s at %v/s, hold until %v; want the current owner's last: degraded at 7/s, hold until %v",
			snap.State, snap.CurrentRate, snap.HoldUntil, held.HoldUntil)
	}
}
