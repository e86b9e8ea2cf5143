package ingest

import (
	"bytes"
	"context"
	"fmt"
)

// This file is the cell's rule for a keyed event published to a
// destination by name (Stripe's: within the dedup window a key names one
// event; the same fingerprint again is that event, answered with its id
// as a duplicate; another fingerprint is refused, errkind.Exists naming
// the original; a refused request stores nothing). It costs one durable
// write per accepted event: the event itself, its fingerprint in a header.
//
//   - precheck, before anything is stored: two events of one request with
//     one key and different fingerprints are a conflict; and where the
//     store alone could not tell a duplicate before storing, a probe asks
//     the streams (originals.probeAll: no write). While the probes are
//     out, the IDEMPOTENCY records of the keys are read (one direct-get
//     request): a record an edge's copy left (forwarded.go) with another
//     fingerprint is a conflict too. A single event into this agent's own
//     lanes whose id the writer certainly never stored (MayHold false)
//     skips both, its store being its only round trip: an edge's copy of
//     its key, recorded but not yet in the lanes, then finds the cell's
//     event there and becomes the dead letter (the mover's check). One
//     the writer may have stored is probed: its store may go through
//     INGEST (the partition just opened, or another agent's event waits
//     there), whose dedup window forgot, if the server restarted, what
//     its mover moved. Probed are the lanes of
//     the event's partition when the event goes into INGEST (this agent
//     does not own the partition: an original its owner stored straight
//     into the lanes is unknown to INGEST's dedup), and, for a request of
//     several events, both the lanes and INGEST (a duplicate found only by
//     the store would come after the request's other events were stored;
//     an owner's append may go through INGEST, and an original may wait
//     there for the mover), but for an event of a partition this agent
//     owns whose writer knows the id is new there (LocalStore.MayHold: the
//     writer is the lanes' only one and remembers a window's ids, and
//     nothing it forwarded waits in INGEST) and, for a request of several
//     events, whose partition has nothing waiting in INGEST at all
//     (LocalStore.WaitsInIngest: one look per partition; another agent's
//     event there is unknown to the writer).
//     A probe's duplicate is compared now: a conflict refuses the request,
//     the same event is answered as a duplicate and not stored again.
//   - store, then verify: the store's answer for each event; a duplicate
//     the precheck did not see (a single event into its own lanes, or one
//     that raced another publish) is compared with its original. Of two
//     racing publishes with one key and different payloads the stream
//     stores exactly one; the other is refused.
//
// At an edge the gateway keeps the create-only records of idempotency.go
// instead: an edge's buffer has no owner to compare with.

// precheck refuses a request whose keyed direct events conflict with each
// other or with an original the probes find; it returns, by index in
// events, those found to be duplicates of the same event (not stored
// again). Its error is errkind.Exists for a conflict, else a failure.
func (g *Gateway) precheck(ctx context.Context, events []*prepared, inBatch bool) (map[int]Stored, error) {
	if g.edge != nil {
		return nil, nil
	}
	var keyed []int
	for i, p := range events {
		if p.fingerprint != nil {
			keyed = append(keyed, i)
		}
	}
	if len(keyed) == 0 {
		return nil, nil
	}
	if err := conflictWithin(events, keyed, inBatch); err != nil {
		return nil, err
	}
	single := len(events) == 1
	// Per partition: whether INGEST may hold an unmoved event of it (one
	// look each, asked only for a batch's events MayHold calls new).
	var waits map[int]bool
	waitsInIngest := func(p int) bool {
		w, ok := waits[p]
		if !ok {
			var err error
			if w, err = g.local.WaitsInIngest(ctx, p); err != nil {
				w = true // not known: probe
			}
			if waits == nil {
				waits = make(map[int]bool)
			}
			waits[p] = w
		}
		return w
	}
	var probes []probe
	var of []int // events index of each probe
	ids := make([]string, 0, len(keyed))
	for _, i := range keyed {
		p := events[i]
		ids = append(ids, p.msgID)
		local := g.local != nil && g.local.Owns(p.partition)
		if single && local && !g.local.MayHold(p.partition, p.msgID) {
			// New to its lanes: the store is the only round trip. An id
			// the writer may have stored is probed first, for the store
			// may go through INGEST (the partition just opened, or
			// another agent's event of it waits there), whose dedup
			// window forgot what its mover moved once the server
			// restarted.
			continue
		}
		if local && !g.local.MayHold(p.partition, p.msgID) && !waitsInIngest(p.partition) {
			// The owner's writer knows the id is new to its lanes, and
			// nothing of the partition waits in INGEST (another agent's
			// event there would be found only by the store, after the
			// request's other events were stored).
			continue
		}
		probes = append(probes, lanesProbe(p.partition, p.event, p.msgID))
		of = append(of, i)
		// An event of a partition owned here may still wait in INGEST
		// (MayHold: the owner forwarded it, its mover has not moved it);
		// the store would find it only after the request's other events.
		if !single {
			probes = append(probes, ingestProbe(p.partition, p.event, p.msgID))
			of = append(of, i)
		}
	}
	if len(probes) == 0 {
		// A single event into this agent's own lanes: its store is the
		// only round trip (see the file comment for an edge's record).
		return nil, nil
	}
	futures, err := g.originals.sendProbes(probes)
	if err != nil {
		return nil, err
	}
	// While the probes are out: an edge's record of a key (forwarded.go).
	records, err := g.originals.recorded(ctx, ids)
	if err != nil {
		return nil, err
	}
	got, err := collectProbes(ctx, probes, futures)
	if err != nil {
		return nil, err
	}
	for _, i := range keyed {
		p := events[i]
		if rec, ok := records[p.msgID]; ok && !bytes.Equal(rec, p.fingerprint) {
			return nil, conflictError(p, p.index, inBatch)
		}
	}
	var known map[int]Stored
	for k, at := range got {
		i := of[k]
		if _, done := known[i]; done || !at.Duplicate {
			continue
		}
		p := events[i]
		same, err := g.originals.same(ctx, at, p.partition, p.event, p.fingerprint, g.delivered)
		if err != nil {
			return nil, err
		}
		if !same {
			return nil, conflictError(p, p.index, inBatch)
		}
		if known == nil {
			known = make(map[int]Stored)
		}
		known[i] = at
	}
	return known, nil
}

// conflictWithin refuses a request that uses one key for two different
// events.
func conflictWithin(events []*prepared, keyed []int, inBatch bool) error {
	if len(keyed) < 2 {
		return nil
	}
	first := make(map[string]*prepared, len(keyed))
	for _, i := range keyed {
		p := events[i]
		f, seen := first[p.msgID]
		if !seen {
			first[p.msgID] = p
			continue
		}
		if !bytes.Equal(f.fingerprint, p.fingerprint) {
			return conflictError(p, p.index, inBatch)
		}
	}
	return nil
}

// storeNew stores the events but those the precheck knows are stored
// already (known), and returns where each event is.
func (g *Gateway) storeNew(ctx context.Context, events []*prepared, known map[int]Stored) ([]Stored, error) {
	if len(known) == 0 {
		return g.store(ctx, events)
	}
	at := make([]Stored, len(events))
	fresh := make([]*prepared, 0, len(events)-len(known))
	var where []int
	for i, p := range events {
		if k, ok := known[i]; ok {
			at[i] = k
			continue
		}
		fresh = append(fresh, p)
		where = append(where, i)
	}
	if len(fresh) == 0 {
		// Stored by an earlier request, maybe not yet synced (--fsync).
		return at, g.durable.Commit(ctx)
	}
	got, err := g.store(ctx, fresh)
	for k, a := range got {
		at[where[k]] = a
	}
	return at, err
}

// verify compares each keyed direct event the store answered as a
// duplicate (and the precheck had not) with its original; another
// fingerprint is a conflict (errkind.Exists).
func (g *Gateway) verify(ctx context.Context, events []*prepared, at []Stored, known map[int]Stored, inBatch bool) error {
	if g.edge != nil {
		return nil
	}
	for i, p := range events {
		if p.fingerprint == nil || !at[i].Duplicate {
			continue
		}
		if _, ok := known[i]; ok || storedHere(events, at, i) {
			continue
		}
		same, err := g.originals.same(ctx, at[i], p.partition, p.event, p.fingerprint, g.delivered)
		if err != nil {
			return err
		}
		if !same {
			if len(events) > 1 {
				return racedConflictError(p, p.index)
			}
			return conflictError(p, p.index, inBatch)
		}
	}
	return nil
}

// storedHere tells whether event i's original is another event of the
// same request (one key twice: conflictWithin checked they are the same).
func storedHere(events []*prepared, at []Stored, i int) bool {
	for j := range i {
		if events[j].msgID == events[i].msgID && !at[j].Duplicate && at[j].Stream == at[i].Stream && at[j].Seq == at[i].Seq {
			return true
		}
	}
	return false
}

// racedConflictError answers a request of several events one of which a
// racing publish of its key stored first with another payload: the
// request's other events were stored (the precheck had found the key
// free), so it does not say nothing was.
func racedConflictError(p *prepared, i int) error {
	err := conflictError(p, i, false)
	return fmt.Errorf("events[%d]: %w (another publish stored this key's event while this request was stored; its other events were stored: retrying them is answered as duplicates)", i, err)
}
