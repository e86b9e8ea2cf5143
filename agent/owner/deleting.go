package owner

import (
	"sync"
	"time"
)

// deletingHold is how long a subscription whose pending events a forced
// delete archived here is held back while the config that deletes it is
// on its way (milliseconds, normally). Past it, a subscription still in
// the config (the delete failed after the archive) is delivered again.
const deletingHold = 10 * time.Second

// deletingSubscriptions are the subscriptions a forced delete archived on
// this partition moments ago (ArchiveSubscription). The attempts in
// flight then end as they do, but the events queued behind them must not
// go out in the milliseconds before the config says the subscription is
// gone: they were counted archived_later. gather marks them
// (verdict.Facts.SubscriptionDeleting) and they wait for the config.
type deletingSubscriptions struct {
	mu    sync.Mutex
	since map[string]time.Time // subscription id → when archived
}

// hold marks id as being deleted from now on, and forgets the marks past
// deletingHold.
func (d *deletingSubscriptions) hold(id string, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for other, at := range d.since {
		if now.Sub(at) >= deletingHold {
			delete(d.since, other)
		}
	}
	if d.since == nil {
		d.since = make(map[string]time.Time)
	}
	d.since[id] = now
}

// held reports whether id was archived by a forced delete less than
// deletingHold before now.
func (d *deletingSubscriptions) held(id string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.since[id]
	return ok && now.Sub(at) < deletingHold
}
