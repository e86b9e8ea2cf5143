package owner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/edge"
)

// ForwardMarksBucket is the key-value bucket where each partition's mover
// keeps, per edge buffer, the highest sequence it has stored from it.
const ForwardMarksBucket = "EDGE_FORWARDED"

// forwardMarksTTL is how long a mark outlives its last advance. The cell
// can take an event again only in the second or so after it took it (see
// forwardMarks), so a mark older than this guards nothing: it expires
// instead of accumulating for edges long gone.
const forwardMarksTTL = 24 * time.Hour

// forwardMarks keeps a mover from storing an edge's event twice when the
// edge forwards it again. The cell's source tells the edge what it took
// by flow control, up to a second or so after storing it; a cell
// restarted within that second takes those events again, and by then
// neither INGEST (its duplicate window is rebuilt from the messages it
// still holds, and the mover removed them) nor the lanes (they may be
// delivered already) remember their ids. The edge's buffer numbers its
// events, and each partition receives an edge's events in that order: so
// the highest sequence stored per (partition, buffer) — a mark — tells a
// copy taken again (at or below it) from one never seen.
//
// A mark advances only after the events up to it are stored in the
// lanes, and before INGEST is acked for them: a mark can only be behind
// what is stored (a duplicate then, never a loss). A buffer recreated
// under the same edge name starts another incarnation (edge.Origin.Buffer),
// with marks of its own. The mover's goroutine is the only user.
type forwardMarks struct {
	p        int
	js       jetstream.JetStream
	replicas int
	log      *slog.Logger
	kv       jetstream.KeyValue // nil until an edge's event first comes
	marks    map[string]uint64  // by edge.Origin.Mark(): loaded or advanced
}

func newForwardMarks(p int, js jetstream.JetStream, replicas int, log *slog.Logger) *forwardMarks {
	return &forwardMarks{p: p, js: js, replicas: replicas, log: log, marks: make(map[string]uint64)}
}

// key is mark's key in the bucket for this partition.
func (f *forwardMarks) key(mark string) string { return "p" + strconv.Itoa(f.p) + "." + mark }

// bucket opens (creating) the marks' bucket.
func (f *forwardMarks) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	if f.kv != nil {
		return f.kv, nil
	}
	kv, err := f.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      ForwardMarksBucket,
		Description: "Per partition and edge buffer, the highest sequence stored in the lanes: an edge's event forwarded again is known.",
		History:     1,
		TTL:         forwardMarksTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    max(f.replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("create %s bucket: %w", ForwardMarksBucket, err)
	}
	f.kv = kv
	return kv, nil
}

// taken reports whether the event at o was stored already: its sequence
// is at or below its buffer's mark. A mark that cannot be read counts as
// none (the event is stored; the lanes' dedup may still catch a copy).
func (f *forwardMarks) taken(ctx context.Context, o edge.Origin) bool {
	mark, ok := f.marks[o.Mark()]
	if !ok {
		var err error
		if mark, err = f.load(ctx, o.Mark()); err != nil {
			f.log.Warn("read an edge buffer's forward mark; storing its events unchecked", "edge", o.Edge, "error", err)
			return false
		}
		f.marks[o.Mark()] = mark
	}
	return o.Seq <= mark
}

func (f *forwardMarks) load(ctx context.Context, mark string) (uint64, error) {
	kv, err := f.bucket(ctx)
	if err != nil {
		return 0, err
	}
	entry, err := kv.Get(ctx, f.key(mark))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(entry.Value()), 10, 64)
}

// advance raises the marks to the highest sequence of each buffer among
// stored, events just stored in the lanes (the zero Origin: not an
// edge's). A mark that cannot be written stays behind: at worst a copy
// forwarded again is stored again.
func (f *forwardMarks) advance(ctx context.Context, stored []edge.Origin) {
	var highest map[string]uint64
	for _, o := range stored {
		if o.Seq == 0 {
			continue // not an edge's: most events, at no cost
		}
		mark := o.Mark()
		if o.Seq > highest[mark] && o.Seq > f.marks[mark] {
			if highest == nil {
				highest = make(map[string]uint64)
			}
			highest[mark] = o.Seq
		}
	}
	for mark, seq := range highest {
		kv, err := f.bucket(ctx)
		if err == nil {
			_, err = kv.Put(ctx, f.key(mark), []byte(strconv.FormatUint(seq, 10)))
		}
		if err != nil {
			f.log.Warn("advance an edge buffer's forward mark", "mark", mark, "seq", seq, "error", err)
			continue
		}
		f.marks[mark] = seq
	}
}
