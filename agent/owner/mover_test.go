package owner

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func ingestMeta(consumerSeq, delivered uint64) *jetstream.MsgMetadata {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Consumer: consumerSeq, Stream: 100 + consumerSeq}, NumDelivered: delivered}
}

func TestIngestOrderRefusesGapsAndRedeliveries(t *testing.T) {
	var order ingestOrder
	for _, seq := range []uint64{4, 5, 6} { // a fresh consumer may start anywhere
		if err := order.check(ingestMeta(seq, 1)); err != nil {
			t.Fatalf("in-order message %d: %v", seq, err)
		}
	}
	if err := order.check(ingestMeta(8, 1)); !errors.Is(err, ErrMoveGap) {
		t.Fatalf("a skipped message: %v, want ErrMoveGap", err)
	}
	if err := order.check(ingestMeta(6, 1)); !errors.Is(err, ErrMoveGap) {
		t.Fatalf("a repeated consumer sequence: %v, want ErrMoveGap", err)
	}
	if err := order.check(ingestMeta(7, 2)); !errors.Is(err, ErrMoveGap) {
		t.Fatalf("a redelivery: %v, want ErrMoveGap", err)
	}
	if err := order.check(ingestMeta(7, 1)); err != nil {
		t.Fatalf("the next message after refused ones: %v", err)
	}
	var first ingestOrder
	if err := first.check(ingestMeta(1, 3)); !errors.Is(err, ErrMoveGap) {
		t.Fatalf("a redelivered first message: %v, want ErrMoveGap", err)
	}
}
