package edge_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/lanes"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/ports"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := ports.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func startNATS(t *testing.T, cfg natsd.Config) *natsd.Server {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	s, err := natsd.Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// An edge's buffer forwards into the cell's real INGEST stream, under
// INGEST's own subjects, and empties as the cell takes its events; full,
// it refuses a store (IsFull) and keeps what it holds; the source is added
// once and removed.
func TestEdgeBufferForwardsIntoIngest(t *testing.T) {
	ctx := context.Background()
	leaf := freeAddr(t)
	cell := startNATS(t, natsd.Config{Name: "cell", LeafListen: leaf, LeafPassword: "pw"})
	if _, err := ingest.New(ctx, cell.JetStream(), destinations.NewRegistry(), ingest.Config{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	at := startNATS(t, natsd.Config{Name: "edge-a", Domain: edge.Domain("edge-a"), LeafRemotes: []string{"nats-leaf://" + leaf}, LeafPassword: "pw"})
	poll.True(t, "the edge joined the cell", 20*time.Second, func() bool { return at.LeafConnections() == 1 })
	buf, err := edge.Open(ctx, at.JetStream(), edge.Config{Name: "edge-a", MaxBytes: 64 << 10, DedupWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	store := func(i int) error {
		msg := nats.NewMsg(edge.Subject("edge-a", 3, "orders"))
		msg.Data = []byte(strconv.Itoa(i))
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("evt-%d", i))
		_, err := at.JetStream().PublishMsg(ctx, msg)
		return err
	}
	// Before the cell forwards it, the buffer holds what was stored.
	for i := range 10 {
		if err := store(i); err != nil {
			t.Fatal(err)
		}
	}
	st, err := buf.Stats(ctx)
	if err != nil || st.Events != 10 || st.Oldest.IsZero() {
		t.Fatalf("buffer stats %+v, %v; want 10 events and their age", st, err)
	}
	for range 2 { // the second is a no-op
		if err := edge.AddSource(ctx, cell.JetStream(), "edge-a"); err != nil {
			t.Fatal(err)
		}
	}
	ingestStream, err := cell.JetStream().Stream(ctx, lanes.IngestStream)
	if err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the buffer forwarded into INGEST and emptied", 30*time.Second, func() bool {
		info, err := ingestStream.Info(ctx)
		st, serr := buf.Stats(ctx)
		return err == nil && serr == nil && info.State.Msgs == 10 && st.Events == 0
	})
	// An agent's restart (ingest.New again) keeps the edge's source.
	if _, err := ingest.New(ctx, cell.JetStream(), destinations.NewRegistry(), ingest.Config{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	info, _ := ingestStream.Info(ctx)
	if len(info.Config.Sources) != 1 {
		t.Fatalf("INGEST has %d sources, want 1", len(info.Config.Sources))
	}
	m, err := ingestStream.GetMsg(ctx, 1)
	if err != nil || m.Subject != lanes.IngestSubject(3, "orders") || string(m.Data) != "0" {
		t.Fatalf("INGEST's first message: %v %v, want %s with 0", m, err, lanes.IngestSubject(3, "orders"))
	}

	// Not forwarded any more: the buffer fills, then refuses.
	if err := edge.RemoveSource(ctx, cell.JetStream(), "edge-a"); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 8<<10)
	refused := false
	for i := range 20 {
		msg := nats.NewMsg(edge.Subject("edge-a", 3, "orders"))
		msg.Data = big
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("big-%d", i))
		if _, err := at.JetStream().PublishMsg(ctx, msg); err != nil {
			if !edge.IsFull(err) {
				t.Fatalf("store into a full buffer: %v, want IsFull", err)
			}
			refused = true
			break
		}
	}
	if !refused {
		t.Fatal("160 KiB stored into a 64 KiB buffer")
	}
	if st, err := buf.Stats(ctx); err != nil || st.Events == 0 || st.Bytes > 64<<10 {
		t.Fatalf("full buffer stats %+v, %v", st, err)
	}
	info, _ = ingestStream.Info(ctx)
	if len(info.Config.Sources) != 0 {
		t.Fatalf("INGEST still has %d sources after RemoveSource", len(info.Config.Sources))
	}
}
