package owner

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/ownership"
)

// Fakes of the few JetStream calls a part makes, for unit tests without a
// server: any other call panics (the embedded interface is nil).

// fakeStream records purges.
type fakeStream struct {
	jetstream.Stream
	mu     sync.Mutex
	purges []jetstream.StreamPurgeRequest
}

func (s *fakeStream) Purge(_ context.Context, opts ...jetstream.StreamPurgeOpt) error {
	var req jetstream.StreamPurgeRequest
	for _, opt := range opts {
		if err := opt(&req); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purges = append(s.purges, req)
	return nil
}

// takePurges returns the purges since the last call.
func (s *fakeStream) takePurges() []jetstream.StreamPurgeRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.purges
	s.purges = nil
	return out
}

// fakeJS records published messages and acks them with the next sequence.
type fakeJS struct {
	jetstream.JetStream
	mu   sync.Mutex
	seq  uint64
	msgs []*nats.Msg
}

func (j *fakeJS) PublishMsg(_ context.Context, msg *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.seq++
	j.msgs = append(j.msgs, msg)
	return &jetstream.PubAck{Sequence: j.seq}, nil
}

func (j *fakeJS) published() []*nats.Msg {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]*nats.Msg(nil), j.msgs...)
}

// testFence is a fence on partition p under a fresh in-process lease.
func testFence(t *testing.T, p int, js jetstream.JetStream) (*fence, *ownership.Lease) {
	t.Helper()
	lease, err := ownership.NewLocal().TryAcquire(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return &fence{p: p, lease: lease, js: js}, lease
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
