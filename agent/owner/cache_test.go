package owner

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// encodedEvents makes n events as the writer gets them: encoded, with
// payloads of payloadSize bytes.
func encodedEvents(t *testing.T, n, payloadSize int) [][]byte {
	t.Helper()
	out := make([][]byte, n)
	for i := range out {
		wire, err := proto.Marshal(&rivorav1.Event{
			EventId:        uuid.Must(uuid.NewV7()).String(),
			DestinationId:  "dest-orders",
			CustomerId:     fmt.Sprintf("customer-%d", i%1000),
			LaneKey:        fmt.Sprintf("order-%d", i),
			Type:           "order.created",
			Payload:        make([]byte, payloadSize),
			ContentType:    "application/json",
			AcceptedAt:     timestamppb.New(time.Unix(1_700_000_000, int64(i))),
			Traceparent:    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			SubscriptionId: "sub-orders",
			ConfigVersion:  42,
		})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = wire
	}
	return out
}

// The cache's bytes are what its events cost on the heap, not just their
// payloads: a partition filling its cache keeps about its budget of heap
// for it, whatever the payload size (issue 26: 10M small events once
// took 4.5 GB).
func TestEventCacheCountsTheHeapItsEventsTake(t *testing.T) {
	for _, payloadSize := range []int{0, 64, 1024, 16 << 10} {
		t.Run(fmt.Sprintf("payload=%d", payloadSize), func(t *testing.T) {
			var c eventCache
			// Fill the cache as the writer does, event by event, until
			// it refuses; the heap is measured over the kept events.
			// kept is held as the scheduler holds cached events: in a
			// map by lane and sequence (16-byte keys).
			kept := map[[2]uint64]string{}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for {
				batch := encodedEvents(t, 1024, payloadSize)
				full := false
				for _, data := range batch {
					cached := c.keep(data)
					if cached == "" {
						full = true
						break
					}
					kept[[2]uint64{0, uint64(len(kept))}] = cached
				}
				batch = nil
				if full {
					break
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
			ratio := heap / float64(c.bytes.Load())
			t.Logf("%d events kept, %.0f B of heap each, counted %.0f B: heap/budget %.2f", len(kept), heap/float64(len(kept)), float64(c.bytes.Load())/float64(len(kept)), ratio)
			if ratio > 1.2 {
				t.Errorf("the cache's events take %.2fx the bytes it counts, want at most 1.2x", ratio)
			}
			if ratio < 0.8 {
				t.Errorf("the cache counts %.2fx its events' heap, want at least 0.8x: it keeps too few", 1/ratio)
			}
			runtime.KeepAlive(kept)
		})
	}
}
