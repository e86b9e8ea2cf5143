package deadletters

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// replayMarks are which lines of the archive's objects a replay handled
// (re-accepted, found already stored, or skipped as a later death of an
// event the replay re-accepted) and when: when the replay began
// re-ingesting the batch. Every replay shares them, whatever its filter,
// so that no replay sends a dead letter another one sent (after the
// stream's dedup window, receivers would see its webhook-id again), and a
// run that stops resumes where it was.
//
// The time tells a later death of an event apart: one that died before a
// replay handled the event was covered by that replay (a repeat), one
// that died after it is the replayed event dying again, to be replayed
// in its turn.
//
// A mark is written after what it marks was re-ingested: a replay that
// dies in between sends that batch again on the next run, within the
// dedup window a duplicate the stream drops (replays have their own dedup
// id).
type replayMarks struct {
	kv jetstream.KeyValue
	// objects are the marks read so far, by archive object key.
	objects map[string]*objectMarks
}

// objectMarks are one archive object's handled lines, as the bucket
// holds them (encodeMarks).
type objectMarks struct {
	// at is, per handled line, when the replay that handled it began
	// re-ingesting it (Unix milliseconds).
	at map[int]int64
	// rev is the bucket entry's revision (0: none yet), so that two
	// replays marking lines of one object keep each other's marks.
	rev uint64
}

func newReplayMarks(kv jetstream.KeyValue) *replayMarks {
	return &replayMarks{kv: kv, objects: map[string]*objectMarks{}}
}

// markKey is the bucket key of an archive object's marks: object keys
// hold characters a bucket key may not.
func markKey(object string) string {
	sum := sha256.Sum256([]byte(object))
	return "lines." + hex.EncodeToString(sum[:16])
}

// load reads object's marks from the bucket (none yet: empty).
func (m *replayMarks) load(ctx context.Context, object string) (*objectMarks, error) {
	if om, ok := m.objects[object]; ok {
		return om, nil
	}
	om := &objectMarks{at: map[int]int64{}}
	entry, err := m.kv.Get(ctx, markKey(object))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, fmt.Errorf("read the replay marks of %s: %w", object, err)
	default:
		if om.at, err = decodeMarks(entry.Value()); err != nil {
			return nil, fmt.Errorf("read the replay marks of %s: %w", object, err)
		}
		om.rev = entry.Revision()
	}
	m.objects[object] = om
	return om, nil
}

// reload reads object's marks from the bucket again, dropping those read
// before: another replay may have marked lines since.
func (m *replayMarks) reload(ctx context.Context, object string) (*objectMarks, error) {
	m.forget(object)
	return m.load(ctx, object)
}

// forget drops object's marks read so far: a caller done with the object
// keeps no memory of it.
func (m *replayMarks) forget(object string) {
	delete(m.objects, object)
}

// handledAt is when a replay handled line i of object (Unix
// milliseconds), and whether one did (object's marks loaded).
func (m *replayMarks) handledAt(object string, i int) (int64, bool) {
	om := m.objects[object]
	if om == nil {
		return 0, false
	}
	at, ok := om.at[i]
	return at, ok
}

// show sets dl.ReplayedAt, for an answer, from the mark of line i of
// object (dl).
func (m *replayMarks) show(ctx context.Context, dl *rivorav1.DeadLetter, object string, i int) error {
	if _, err := m.load(ctx, object); err != nil {
		return err
	}
	if at, ok := m.handledAt(object, i); ok {
		dl.ReplayedAt = timestamppb.New(time.UnixMilli(at))
	}
	return nil
}

// markTries bounds the writes of one batch's marks racing another
// replay's writes to the same object.
const markTries = 5

// mark records lines of object as handled at (Unix milliseconds).
// Another replay may have marked lines of it since they were read: then
// its marks are read again and these added to them.
func (m *replayMarks) mark(ctx context.Context, object string, lines []int, at int64) error {
	if len(lines) == 0 {
		return nil
	}
	om, err := m.load(ctx, object)
	if err != nil {
		return err
	}
	for try := 1; ; try++ {
		for _, i := range lines {
			om.at[i] = at
		}
		value := encodeMarks(om.at)
		var rev uint64
		if om.rev == 0 {
			rev, err = m.kv.Create(ctx, markKey(object), value)
		} else {
			rev, err = m.kv.Update(ctx, markKey(object), value, om.rev)
		}
		if err == nil {
			om.rev = rev
			return nil
		}
		if try == markTries || ctx.Err() != nil {
			return fmt.Errorf("mark %d lines of %s replayed: %w", len(lines), object, err)
		}
		if om, err = m.reload(ctx, object); err != nil {
			return err
		}
	}
}

// encodeMarks writes marks in line order as pairs of varints: the line's
// distance from the one before, and its time's difference from the one
// before's. Lines of one batch share a time and mostly follow each
// other: about two bytes a line.
func encodeMarks(at map[int]int64) []byte {
	lines := make([]int, 0, len(at))
	for i := range at {
		lines = append(lines, i)
	}
	slices.Sort(lines)
	out := make([]byte, 0, 2*len(lines)+binary.MaxVarintLen64)
	prevLine, prevAt := -1, int64(0)
	for _, i := range lines {
		out = binary.AppendUvarint(out, uint64(i-prevLine))
		out = binary.AppendVarint(out, at[i]-prevAt)
		prevLine, prevAt = i, at[i]
	}
	return out
}

func decodeMarks(b []byte) (map[int]int64, error) {
	at := map[int]int64{}
	line, t := -1, int64(0)
	for len(b) > 0 {
		step, n := binary.Uvarint(b)
		if n <= 0 || step == 0 || step > 1<<31 {
			return nil, errors.New("marks are corrupt")
		}
		b = b[n:]
		diff, n := binary.Varint(b)
		if n <= 0 {
			return nil, errors.New("marks are corrupt")
		}
		b = b[n:]
		line, t = line+int(step), t+diff
		at[line] = t
	}
	return at, nil
}
