package diskroom

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// In a cell a store holds replicas of the other owners' lanes too, so
// which customers fill it is a question about the cell's pending events,
// not only this agent's. Every agent says, every second, on
// pendingSubject.<its name>, how many events are pending on the
// partitions it owns (in all, and for its heaviest customers); each sums
// what the others said within reportTTL with its own.

// pendingSubject is where agents say their pending events.
const pendingSubject = "rivora.pending."

// reportTTL is how long another agent's word counts: an agent that
// stopped saying anything (stopped, cut off) drops out.
const reportTTL = 5 * time.Second

// reportedCustomers bounds the customers a report names: a customer
// under 1/reportedCustomers of an agent's pending events cannot hold a
// quarter of the cell's through it.
const reportedCustomers = 64

// pendingReport is one agent's word.
type pendingReport struct {
	Total    int            `json:"total"`
	Customer map[string]int `json:"customers"`
	at       time.Time
}

// Cell is the cell's pending events by customer, as the agents say them.
type Cell struct {
	nc   *nats.Conn
	name string
	own  func() map[string]int
	log  *slog.Logger
	now  func() time.Time

	mu     sync.Mutex
	others map[string]pendingReport // by agent name
}

// ShareInCell starts hearing the other agents of the cell on nc; Run
// says this agent's own (own: its pending events by customer).
func ShareInCell(nc *nats.Conn, name string, own func() map[string]int, log *slog.Logger) (*Cell, error) {
	c := &Cell{nc: nc, name: name, own: own, log: log, now: time.Now, others: map[string]pendingReport{}}
	if _, err := nc.Subscribe(pendingSubject+">", c.heard); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cell) heard(m *nats.Msg) {
	from := m.Subject[len(pendingSubject):]
	if from == c.name {
		return
	}
	var r pendingReport
	if err := json.Unmarshal(m.Data, &r); err != nil {
		c.log.Warn("an unreadable report of pending events; ignored", "from", from, "error", err)
		return
	}
	r.at = c.now()
	c.mu.Lock()
	c.others[from] = r
	c.mu.Unlock()
}

// Run says this agent's pending events every second until ctx ends.
func (c *Cell) Run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		data, err := json.Marshal(report(c.own()))
		if err == nil {
			err = c.nc.Publish(pendingSubject+c.name, data)
		}
		if err != nil && ctx.Err() == nil {
			c.log.Debug("could not say this agent's pending events to the cell", "error", err)
		}
	}
}

// report is what an agent says of its pending events: the total, and
// its reportedCustomers heaviest customers.
func report(pending map[string]int) pendingReport {
	r := pendingReport{Customer: map[string]int{}}
	ids := make([]string, 0, len(pending))
	for id, n := range pending {
		r.Total += n
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return pending[ids[i]] > pending[ids[j]] })
	for _, id := range ids[:min(len(ids), reportedCustomers)] {
		r.Customer[id] = pending[id]
	}
	return r
}

// Pending is the cell's pending events by customer (this agent's own in
// full, the others' heaviest customers) and in all.
func (c *Cell) Pending() (byCustomer map[string]int, total int) {
	byCustomer = c.own()
	for _, n := range byCustomer {
		total += n
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for from, r := range c.others {
		if now.Sub(r.at) > reportTTL {
			delete(c.others, from)
			continue
		}
		total += r.Total
		for id, n := range r.Customer {
			byCustomer[id] += n
		}
	}
	return byCustomer, total
}
