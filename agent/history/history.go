// Package history keeps each event's attempt outcomes (the EVENTS stream),
// so "where is my event?" has an answer after it left its lane. Records are
// written asynchronously and expire after the retention period.
package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/agent/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// DefaultRetention is how long outcomes are kept.
const DefaultRetention = 7 * 24 * time.Hour

var recordErrors = promauto.NewCounter(prometheus.CounterOpts{
	Name: "rivora_history_record_errors_total",
	Help: "Event outcomes that could not be written to the EVENTS stream.",
})

// History owns the EVENTS stream.
type History struct {
	nc     *nats.Conn
	stream jetstream.Stream
}

// New creates (or updates) the EVENTS stream.
// replicas is the stream's replica count in a cell (0 means 1).
func New(ctx context.Context, js jetstream.JetStream, retention time.Duration, replicas int) (*History, error) {
	if retention <= 0 {
		retention = DefaultRetention
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        lanes.EventsStream,
		Description: "Attempt outcomes per event, for `rivoractl events get`.",
		Subjects:    []string{"events.>"},
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		MaxAge:      retention,
	})
	if err != nil {
		return nil, fmt.Errorf("create %s stream: %w", lanes.EventsStream, err)
	}
	return &History{nc: js.Conn(), stream: st}, nil
}

// Record appends an outcome without waiting for the store's ack: history
// is for people, and must not slow delivery down.
func (h *History) Record(o *rivorav1.EventOutcome) {
	data, err := proto.Marshal(o)
	if err != nil {
		recordErrors.Inc()
		return
	}
	// A plain publish: the stream stores it without sending an ack back,
	// which halves the cost per attempt. A lost record only makes "where is
	// my event?" less detailed.
	if err := h.nc.Publish(lanes.EventSubject(o.GetEventId()), data); err != nil {
		recordErrors.Inc()
	}
}

// Lookup returns an event's outcomes, oldest first (nil when none).
func (h *History) Lookup(ctx context.Context, eventID string) ([]*rivorav1.EventOutcome, error) {
	subject := lanes.EventSubject(eventID)
	if _, err := h.stream.GetLastMsgForSubject(ctx, subject); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("look up %s: %w", subject, err)
	}
	cons, err := h.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", subject, err)
	}
	var out []*rivorav1.EventOutcome
	for {
		// FetchNoWait returns what is stored now; a plain Fetch would hold
		// every lookup until its wait expired, as more records may come.
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", subject, err)
		}
		done := true
		n := 0
		for msg := range batch.Messages() {
			n++
			o := &rivorav1.EventOutcome{}
			if err := proto.Unmarshal(msg.Data(), o); err != nil {
				return nil, fmt.Errorf("decode %s: %w", subject, err)
			}
			out = append(out, o)
			meta, err := msg.Metadata()
			done = err == nil && meta.NumPending == 0
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("read %s: %w", subject, err)
		}
		if done || n == 0 {
			return out, nil
		}
	}
}
