package history

// The index: once a subject's write bucket has ended (and indexGrace more,
// so that no record of it is still on its way) and every batch the
// writer published to it is acked, the writer appends one more message to
// the same subject: an index of the batches, each batch's stream sequence
// and a 32-bit hash of each of its records' event ids. A lookup then gets
// the subject's last message (one direct get), finds the sequences whose
// batches may hold its id, and gets those (one direct get each) instead
// of walking every message the subject's bucket wrote. Each get still
// loads the message block it is in, but the index is written seconds
// after the batches it lists, so it is usually in the same block.
//
// The index lives in its subject, so it adds no subject (the stream's
// memory grows with subjects, which grow with time), and it expires with
// the bucket: it is the subject's newest message.
//
// An index is trusted only when it accounts for every other message of
// its subject. Its writer counts the subject's messages just before it
// stores it (total; the store then refuses it if another message came
// since the one it expected last), so a lookup can tell from the index
// alone: it gets the last messages of all the subjects that may hold its
// id in one multi-last request, and when each is a complete index
// (covered == total) it gets only the batches they name — two requests
// in all. Otherwise (a subject with no index: its bucket open, history
// written before the index, a crash between the batches and their index;
// a batch stored after the index; an index chain another agent broke) it
// lists the subjects with their counts, reads through an index that
// covers count - 1 messages (one written before total, say), and reads
// every other subject whole, as before the index. So the index is never
// wrong, only sometimes absent.

// In a cell several agents write the same subjects. Each writer publishes
// its index expecting the subject's last message to be its own last
// batch (Nats-Expected-Last-Subject-Sequence); when another writer's
// index came after, it reads that index and publishes one that names it
// (seeAlso) and counts what it covers. A large index is published in
// chunks chained the same way. A lookup reads the last index and those it
// names.
//
// Wire form: the fields below in the HistoryBatch field space (readers of
// batches skip them: a batch reader sees an index as a batch without
// records). An index is told from a batch by its first field.

import (
	"encoding/binary"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

const (
	// indexCoveredField is the count of the subject's other messages the
	// index (with those it names) accounts for. It comes first: it marks
	// an index.
	indexCoveredField protowire.Number = 16
	// indexSeqsField is the sequences of the batches listed, packed
	// varint deltas (the first from 0), ascending.
	indexSeqsField protowire.Number = 17
	// indexCountsField is how many hashes each listed batch has (packed).
	indexCountsField protowire.Number = 18
	// indexHashesField is the batches' id hashes in order (packed fixed32).
	indexHashesField protowire.Number = 19
	// indexSeeAlsoField is the sequences of earlier index messages of the
	// subject whose batches a lookup reads as well (packed varint).
	indexSeeAlsoField protowire.Number = 20
	// indexTotalField is the count of the subject's messages before the
	// index, as its writer counted them (its publish expected the last of
	// them to be the last): covered == total makes the index complete
	// without a count at read time.
	indexTotalField protowire.Number = 21
)

// indexGrace is how long after a bucket ends its subjects are indexed: a
// record takes its subject when recorded and reaches the stream a flush
// interval (or a slow ack) later.
const indexGrace = 2 * time.Second

// maxIndexTries bounds the times a writer rereads a subject's last
// message to chain its index to another's; indexRetryDelay is the wait
// before it reads again when that message is another agent's batch.
const (
	maxIndexTries   = 5
	indexRetryDelay = 500 * time.Millisecond
)

// maxIndexBytes bounds one index message (NATS's default max payload is
// 1 MiB); a bigger index is published in chunks.
const maxIndexBytes = 256 << 10

// idHash is the hash of an event id an index keeps (fnv-1a, 32 bits). A
// collision costs a batch read, never a wrong answer: records are
// matched by id after they are read.
func idHash(eventID string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(eventID); i++ {
		h ^= uint32(eventID[i])
		h *= 16777619
	}
	return h
}

// indexedBatch is one stored batch as an index lists it.
type indexedBatch struct {
	seq    uint64
	hashes []uint32
}

// index is one index message.
type index struct {
	covered uint64
	batches []indexedBatch
	seeAlso []uint64
	// total is the subject's messages before it, counted by its writer
	// (0: not counted).
	total uint64
}

func (ix *index) encode() []byte {
	n := 0
	for _, b := range ix.batches {
		n += len(b.hashes)
	}
	buf := make([]byte, 0, 32+len(ix.batches)*6+n*4+len(ix.seeAlso)*5)
	buf = protowire.AppendTag(buf, indexCoveredField, protowire.VarintType)
	buf = protowire.AppendVarint(buf, ix.covered)
	var packed []byte
	var last uint64
	for _, b := range ix.batches {
		packed = protowire.AppendVarint(packed, b.seq-last)
		last = b.seq
	}
	buf = appendPackedField(buf, indexSeqsField, packed)
	packed = packed[:0]
	for _, b := range ix.batches {
		packed = protowire.AppendVarint(packed, uint64(len(b.hashes)))
	}
	buf = appendPackedField(buf, indexCountsField, packed)
	packed = packed[:0]
	for _, b := range ix.batches {
		for _, h := range b.hashes {
			packed = binary.LittleEndian.AppendUint32(packed, h)
		}
	}
	buf = appendPackedField(buf, indexHashesField, packed)
	packed = packed[:0]
	for _, s := range ix.seeAlso {
		packed = protowire.AppendVarint(packed, s)
	}
	buf = appendPackedField(buf, indexSeeAlsoField, packed)
	if ix.total > 0 {
		buf = protowire.AppendTag(buf, indexTotalField, protowire.VarintType)
		buf = protowire.AppendVarint(buf, ix.total)
	}
	return buf
}

func appendPackedField(buf []byte, field protowire.Number, packed []byte) []byte {
	if len(packed) == 0 {
		return buf
	}
	buf = protowire.AppendTag(buf, field, protowire.BytesType)
	return protowire.AppendBytes(buf, packed)
}

// isIndex reports whether a message of a history subject is an index.
func isIndex(data []byte) bool {
	num, typ, n := protowire.ConsumeTag(data)
	return n > 0 && num == indexCoveredField && typ == protowire.VarintType
}

// decodedIndex is an index as a lookup reads it: the hashes stay encoded.
type decodedIndex struct {
	covered, total uint64
	seqs           []uint64
	counts         []uint64
	hashes         []byte
	seeAlso        []uint64
}

// decodeIndex decodes an index message (ok false when data is not one).
func decodeIndex(data []byte) (ix decodedIndex, ok bool) {
	if !isIndex(data) {
		return ix, false
	}
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return ix, false
		}
		data = data[n:]
		switch {
		case num == indexCoveredField && typ == protowire.VarintType:
			ix.covered, n = protowire.ConsumeVarint(data)
		case num == indexTotalField && typ == protowire.VarintType:
			ix.total, n = protowire.ConsumeVarint(data)
		case typ == protowire.BytesType:
			var v []byte
			if v, n = protowire.ConsumeBytes(data); n < 0 {
				return ix, false
			}
			var err error
			switch num {
			case indexSeqsField:
				ix.seqs, err = appendVarints(ix.seqs, v)
			case indexCountsField:
				ix.counts, err = appendVarints(ix.counts, v)
			case indexHashesField:
				ix.hashes = v
			case indexSeeAlsoField:
				ix.seeAlso, err = appendVarints(ix.seeAlso, v)
			}
			if err != nil {
				return ix, false
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, data)
		}
		if n < 0 {
			return ix, false
		}
		data = data[n:]
	}
	for i := 1; i < len(ix.seqs); i++ { // deltas to sequences
		ix.seqs[i] += ix.seqs[i-1]
	}
	total := uint64(0)
	for _, c := range ix.counts {
		total += c
	}
	if len(ix.counts) != len(ix.seqs) || total*4 != uint64(len(ix.hashes)) {
		return ix, false
	}
	return ix, true
}

func appendVarints(out []uint64, packed []byte) ([]uint64, error) {
	for len(packed) > 0 {
		v, n := protowire.ConsumeVarint(packed)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		out, packed = append(out, v), packed[n:]
	}
	return out, nil
}

// complete reports whether the index accounted for every message of its
// subject before it when it was stored (a message after it is not one of
// those: then the subject's last message is not this index).
func (ix decodedIndex) complete() bool { return ix.total > 0 && ix.covered == ix.total }

// seqsOf appends the sequences of the batches that may hold records of
// the id with hash h.
func (ix decodedIndex) seqsOf(h uint32, out []uint64) []uint64 {
	at := 0
	for i, c := range ix.counts {
		end := at + int(c)*4
		for ; at < end; at += 4 {
			if binary.LittleEndian.Uint32(ix.hashes[at:]) == h {
				out = append(out, ix.seqs[i])
				at = end
				break
			}
		}
	}
	return out
}

// lists reports whether ix is the index message chunk was encoded to
// (stored, though its ack was lost).
func (ix decodedIndex) lists(chunk *index) bool {
	if chunk == nil || len(chunk.batches) != len(ix.seqs) || chunk.covered != ix.covered {
		return false
	}
	for i, b := range chunk.batches {
		if b.seq != ix.seqs[i] {
			return false
		}
	}
	return true
}

// subjectIndex is the index the writer builds for one subject: the
// batches acked so far and not yet in a published index.
type subjectIndex struct {
	subject string
	// due is when the subject's bucket ended, plus indexGrace.
	due time.Time
	// batches is the acked batches not yet in a published index.
	batches []indexedBatch
	// unsettled counts the subject's batches published and not acked.
	unsettled int
	// sending is the index message in the air (nil when none).
	sending *pending
	// prev is the subject's last index message, once there is one, and
	// expect the sequence the subject's last message should have when
	// the next index message is stored (its own last batch, or prev).
	prev   *prevIndex
	expect uint64
	// reread: another message came after expect, or the ack of retry
	// (an index message) was lost; read the subject's last message before
	// going on (tries counts the rereads).
	reread   bool
	rereadAt time.Time
	retry    *index
	tries    int
	// count: the subject's messages are to be counted before its next
	// index message; total is that count (valid while counted).
	count   bool
	counted bool
	total   uint64
}

// prevIndex is what a new index message keeps of the one before it.
type prevIndex struct {
	seq     uint64
	covered uint64
	seeAlso []uint64
}

// dueLocked reports whether the subject's next index message may be
// published at now (the writer also checks that no batch of it waits in
// the round).
func (s *subjectIndex) dueLocked(now time.Time) bool {
	return s.sending == nil && !s.reread && !s.count && s.unsettled == 0 && !now.Before(s.due)
}

// nextChunk takes the next index message to publish: as many acked
// batches as fit in maxIndexBytes, chained to the previous index.
func (s *subjectIndex) nextChunk() *index {
	size, k := 0, 0
	for k < len(s.batches) {
		size += 12 + 4*len(s.batches[k].hashes)
		if k > 0 && size > maxIndexBytes {
			break
		}
		k++
	}
	ix := &index{batches: s.batches[:k:k], covered: uint64(k), total: s.total}
	s.batches = s.batches[k:]
	s.counted = false
	if s.prev != nil {
		ix.covered += s.prev.covered + 1
		ix.seeAlso = append(slices.Clone(s.prev.seeAlso), s.prev.seq)
	}
	return ix
}

// bucketEnd is when the write bucket of a history subject ends (zero when
// the subject is not one).
func bucketEnd(subject string) time.Time {
	w := writeBucket(subject)
	if w < 0 {
		return time.Time{}
	}
	width := BucketWidth
	if len(subject) > len(bodyPrefix) && subject[:len(bodyPrefix)] == bodyPrefix {
		width = BodyBucketWidth
	}
	return time.Unix((w+1)*int64(width/time.Second), 0)
}

// IndexedBatch is a stored batch of a subject as its index lists it: its
// sequence and its records' event ids.
type IndexedBatch struct {
	Seq uint64
	IDs []string
}

// EncodeIndex is the index a writer appends to a subject once its bucket
// is over, listing batches (its own), total being the count of the
// subject's messages before it (the index is complete, and a lookup
// trusts it alone, when that is the batches listed): for tools that
// write a history as the agent does (e2e/bench fills one).
func EncodeIndex(batches []IndexedBatch, total uint64) []byte {
	ix := index{covered: uint64(len(batches)), total: total}
	for _, b := range batches {
		hashes := make([]uint32, len(b.IDs))
		for i, id := range b.IDs {
			hashes[i] = idHash(id)
		}
		ix.batches = append(ix.batches, indexedBatch{seq: b.Seq, hashes: hashes})
	}
	return ix.encode()
}

// IndexDue is when a writer indexes a history subject: its bucket's end
// plus a grace for records on their way (zero for a subject that is not
// one of the history's).
func IndexDue(subject string) time.Time {
	end := bucketEnd(subject)
	if end.IsZero() {
		return end
	}
	return end.Add(indexGrace)
}
