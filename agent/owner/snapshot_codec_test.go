package owner

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"reflect"
	"testing"

	"github.com/google/uuid"

	"github.com/rivora/rivora/agent/scheduler"
	"github.com/rivora/rivora/lanes"
)

func testSnapshot(lanesN, perLane int) *pendingSnapshot {
	s := &pendingSnapshot{partition: 3, laneStore: streamState{Msgs: 9, FirstSeq: 2, LastSeq: 40}, ledger: streamState{Msgs: 1, FirstSeq: 7, LastSeq: 7}}
	seq := uint64(1)
	for l := range lanesN {
		el := scheduler.ExportedLane{ID: lanes.ID{Destination: fmt.Sprintf("d%d", l%7), Customer: "acme", Key: fmt.Sprintf("k%d", l), Subscription: map[bool]string{true: "sub"}[l%3 == 0]}}
		for i := range perLane {
			e := scheduler.ExportedEntry{Seq: seq, AcceptedAt: 1_700_000_000_000_000_000 + int64(seq)*1000, ID: uuid.New()}
			switch {
			case l == 1 && i == 0:
				e.ID, e.OddID = uuid.Nil, "not-a-uuid"
			case l == 2 && i == 0:
				e.AcceptedAt = math.MinInt64 // a zero acceptance time
			}
			el.Entries = append(el.Entries, e)
			seq += uint64(1 + l%3)
		}
		s.lanes = append(s.lanes, el)
	}
	return s
}

func decodeAll(data []byte) (*pendingSnapshot, error) {
	d, err := openSnapshot(data)
	if err != nil {
		return nil, err
	}
	s := &pendingSnapshot{partition: d.partition, laneStore: d.laneStore, ledger: d.ledger}
	for range d.lanes {
		var el scheduler.ExportedLane
		if err := d.lane(func(id lanes.ID, _ int) { el.ID = id }, func(e scheduler.ExportedEntry) { el.Entries = append(el.Entries, e) }); err != nil {
			return nil, err
		}
		s.lanes = append(s.lanes, el)
	}
	return s, d.end()
}

func TestSnapshotEncodingRoundTrips(t *testing.T) {
	want := testSnapshot(20, 5)
	got, err := decodeAll(encodeSnapshot(want))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v\nwant %+v", got, want)
	}
}

// A damaged file is refused with an error, never a panic or a partial
// result: cut anywhere, a flipped byte, another version.
func TestSnapshotDamagedIsRefused(t *testing.T) {
	data := encodeSnapshot(testSnapshot(4, 3))
	for n := range len(data) {
		if _, err := decodeAll(data[:n]); err == nil {
			t.Fatalf("a file cut at %d of %d bytes decoded", n, len(data))
		}
	}
	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x40
		if _, err := decodeAll(bad); err == nil {
			t.Fatalf("a file with byte %d flipped decoded", i)
		}
	}
	// Another version, with a valid checksum.
	other := append([]byte(nil), data[:len(data)-4]...)
	other[len(snapshotMagic)] = snapshotVersion + 1
	other = binary.LittleEndian.AppendUint32(other, crc32.Checksum(other, snapshotCRC))
	if _, err := decodeAll(other); err == nil {
		t.Fatal("a file of another version decoded")
	}
}

// BenchmarkSnapshot1M encodes and decodes a million pending events over
// 100,000 lanes (the bench rebuild's shape).
func BenchmarkSnapshot1M(b *testing.B) {
	s := testSnapshot(100_000, 10)
	data := encodeSnapshot(s)
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			encodeSnapshot(s)
		}
		b.ReportMetric(float64(len(data))/1e6, "MB")
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			d, err := openSnapshot(data)
			if err != nil {
				b.Fatal(err)
			}
			for range d.lanes {
				var r scheduler.Restored
				if err := d.lane(func(lanes.ID, int) {}, func(e scheduler.ExportedEntry) { r.AddUUID(e.Seq, e.ID, e.AcceptedAt) }); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
