package history

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func TestIndexRoundTrip(t *testing.T) {
	ix := index{covered: 7, seeAlso: []uint64{3, 90}, batches: []indexedBatch{
		{seq: 100, hashes: []uint32{idHash("a"), idHash("b")}},
		{seq: 104, hashes: []uint32{idHash("c")}},
		{seq: 1 << 40, hashes: []uint32{idHash("a"), idHash("d"), idHash("a")}},
	}}
	got, ok := decodeIndex(ix.encode())
	if !ok {
		t.Fatal("decodeIndex(an index) = not an index")
	}
	if got.covered != 7 || !slices.Equal(got.seeAlso, []uint64{3, 90}) || !slices.Equal(got.seqs, []uint64{100, 104, 1 << 40}) {
		t.Fatalf("decoded covered %d, seeAlso %v, seqs %v", got.covered, got.seeAlso, got.seqs)
	}
	for id, want := range map[string][]uint64{"a": {100, 1 << 40}, "b": {100}, "c": {104}, "d": {1 << 40}, "e": nil} {
		if seqs := got.seqsOf(idHash(id), nil); !slices.Equal(seqs, want) {
			t.Fatalf("seqsOf(%s) = %v, want %v", id, seqs, want)
		}
	}
	if !got.lists(&ix) {
		t.Fatal("lists(the chunk it was encoded from) = false")
	}
}

// A batch (what every other message of a subject is) is never taken for
// an index, nor is garbage.
func TestBatchIsNotAnIndex(t *testing.T) {
	batch, err := proto.Marshal(&rivorav1.HistoryBatch{
		Outcomes:     []*rivorav1.EventOutcome{{EventId: "e1"}},
		OutcomeTimes: []int64{1},
		Events:       []*rivorav1.Event{{EventId: "e1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]byte{batch, nil, {0xff}, append((&index{covered: 1}).encode(), 0xff)} {
		if _, ok := decodeIndex(data); ok {
			t.Fatalf("decodeIndex(%x) = an index", data)
		}
	}
	// An index read as a batch has no records.
	n := 0
	if err := eachOutcome((&index{covered: 1, batches: []indexedBatch{{seq: 1, hashes: []uint32{1}}}}).encode(), BucketStart(0), func(_ []byte, _ time.Time) { n++ }); err != nil || n != 0 {
		t.Fatalf("eachOutcome(an index) = %d records, %v; want none", n, err)
	}
}

// An index bigger than maxIndexBytes goes in chunks, each chained to the
// one before: it names it and counts it with what it covers.
func TestIndexChunksChain(t *testing.T) {
	s := &subjectIndex{}
	hashes := make([]uint32, 1000)
	for i := range 100 { // ~400 KB of hashes
		s.batches = append(s.batches, indexedBatch{seq: uint64(10 + i), hashes: hashes})
	}
	first := s.nextChunk()
	if len(first.batches) == 0 || len(first.batches) == 100 || first.covered != uint64(len(first.batches)) || first.seeAlso != nil {
		t.Fatalf("first chunk: %d batches, covered %d, seeAlso %v; want some of 100, covering them", len(first.batches), first.covered, first.seeAlso)
	}
	if size := len(first.encode()); size > maxIndexBytes+64 {
		t.Fatalf("first chunk is %d bytes, want at most ~%d", size, maxIndexBytes)
	}
	s.prev = &prevIndex{seq: 500, covered: first.covered}
	second := s.nextChunk()
	if len(first.batches)+len(second.batches) != 100 || len(s.batches) != 0 {
		t.Fatalf("chunks of %d and %d batches (%d left), want the 100 in two", len(first.batches), len(second.batches), len(s.batches))
	}
	if want := uint64(100 + 1); second.covered != want || !slices.Equal(second.seeAlso, []uint64{500}) {
		t.Fatalf("second chunk covers %d, names %v; want %d (every batch and the first chunk) and [500]", second.covered, second.seeAlso, want)
	}
}
