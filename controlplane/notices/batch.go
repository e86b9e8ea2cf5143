package notices

import (
	"fmt"
	"strings"
	"time"
)

// DefaultBatchEvery spaces deadletter.created notices of one destination.
const DefaultBatchEvery = time.Minute

// DefaultGather is how long a batch gathers after its first dead letter:
// a burst (a partner refusing a run of events) makes one notice.
const DefaultGather = 5 * time.Second

// Batcher gathers dead letters per destination into deadletter.created
// notices, at most one per destination per Every, each sent Gather after
// its first dead letter at the earliest. Not safe for concurrent use: the
// control plane's notifier owns it.
//
// Invariants: a batch's count is the number of distinct dead letters
// added since its last notice; its ids are the first MaxEventIDs of them;
// lastSent only moves forward, by at least Every.
type Batcher struct {
	Every   time.Duration
	Gather  time.Duration
	batches map[string]*batch
}

type batch struct {
	lastSent time.Time // zero: never sent
	count    int
	ids      []string
	first    time.Time // when the batch's first dead letter was added
	through  time.Time // the newest dead_at in the batch
}

// NewBatcher returns a Batcher that notifies a destination at most once
// per every, gathering a batch for gather.
func NewBatcher(every, gather time.Duration) *Batcher {
	return &Batcher{Every: every, Gather: gather, batches: make(map[string]*batch)}
}

// Add counts one dead letter of a destination that died at deadAt, seen
// at now (the caller adds each once).
func (b *Batcher) Add(destination, eventID string, deadAt, now time.Time) {
	bt := b.batches[destination]
	if bt == nil {
		bt = &batch{}
		b.batches[destination] = bt
	}
	if bt.count == 0 {
		bt.first = now
	}
	bt.count++
	if deadAt.After(bt.through) {
		bt.through = deadAt
	}
	if len(bt.ids) < MaxEventIDs {
		bt.ids = append(bt.ids, eventID)
	}
}

// Due returns the notices that may go at now: each destination with dead
// letters gathered for Gather whose last notice is at least Every old (or
// that had none).
func (b *Batcher) Due(now time.Time) []Notice {
	var out []Notice
	for d, bt := range b.batches {
		if bt.count == 0 {
			if now.Sub(bt.lastSent) >= b.Every {
				delete(b.batches, d) // quiet for a full period: the next one goes at once
			}
			continue
		}
		if now.Sub(bt.first) < b.Gather || (!bt.lastSent.IsZero() && now.Sub(bt.lastSent) < b.Every) {
			continue
		}
		out = append(out, deadLetterNotice(d, bt, now))
		bt.lastSent, bt.count, bt.ids, bt.through = now, 0, nil, time.Time{}
	}
	return out
}

func deadLetterNotice(destination string, bt *batch, now time.Time) Notice {
	what := fmt.Sprintf("%d events", bt.count)
	if bt.count == 1 {
		what = "1 event"
	}
	ids := strings.Join(bt.ids, ", ")
	if bt.count > len(bt.ids) {
		ids = fmt.Sprintf("the first %d: %s", len(bt.ids), ids)
	}
	msg := fmt.Sprintf("%s of destination %s became dead letters (%s): `rivoractl dlq list --destination %s`, then `rivoractl replay --destination %s`",
		what, destination, ids, destination, destination)
	return Notice{
		Type: DeadLetterCreated, DestinationID: destination, At: now, Count: bt.count, EventIDs: bt.ids, Message: msg,
		Key: key(DeadLetterCreated, destination, bt.through.UnixNano(), bt.count), Through: bt.through,
	}
}
