package deadletters

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// replayMarks are which lines of the archive's objects a replay handled:
// re-accepted, found already stored, or skipped as a later death of an
// event the replay re-accepted. Every replay shares them, whatever its
// filter, so that no replay sends a dead letter another one sent (after
// the stream's dedup window, receivers would see its webhook-id again),
// and a run that stops resumes where it was.
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
// holds them: bit i of lines is line i.
type objectMarks struct {
	lines []byte
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
	om := &objectMarks{}
	entry, err := m.kv.Get(ctx, markKey(object))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, fmt.Errorf("read the replay marks of %s: %w", object, err)
	default:
		om.lines, om.rev = entry.Value(), entry.Revision()
	}
	m.objects[object] = om
	return om, nil
}

// has reports whether line i of object was handled by a replay (object's
// marks loaded).
func (m *replayMarks) has(object string, i int) bool {
	om := m.objects[object]
	return om != nil && i/8 < len(om.lines) && om.lines[i/8]&(1<<(i%8)) != 0
}

// markTries bounds the writes of one batch's marks racing another
// replay's writes to the same object.
const markTries = 5

// mark records lines of object as handled. Another replay may have marked
// lines of it since they were read: then its marks are read again and
// these added to them.
func (m *replayMarks) mark(ctx context.Context, object string, lines []int) error {
	if len(lines) == 0 {
		return nil
	}
	om, err := m.load(ctx, object)
	if err != nil {
		return err
	}
	for try := 1; ; try++ {
		for _, i := range lines {
			if need := i/8 + 1; len(om.lines) < need {
				om.lines = append(om.lines, make([]byte, need-len(om.lines))...)
			}
			om.lines[i/8] |= 1 << (i % 8)
		}
		var rev uint64
		if om.rev == 0 {
			rev, err = m.kv.Create(ctx, markKey(object), om.lines)
		} else {
			rev, err = m.kv.Update(ctx, markKey(object), om.lines, om.rev)
		}
		if err == nil {
			om.rev = rev
			return nil
		}
		if try == markTries || ctx.Err() != nil {
			return fmt.Errorf("mark %d lines of %s replayed: %w", len(lines), object, err)
		}
		delete(m.objects, object)
		if om, err = m.load(ctx, object); err != nil {
			return err
		}
	}
}
