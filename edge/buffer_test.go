package edge_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
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

	// Not forwarded any more: the buffer fills, then refuses. Stored
	// past Reserve (as here), a store is refused only at the stream's own
	// limit, above MaxBytes.
	if err := edge.RemoveSource(ctx, cell.JetStream(), "edge-a"); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 8<<10)
	refused := false
	for i := range 200 {
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
		t.Fatalf("1.6 MiB stored into a buffer whose stream holds %d bytes", edge.StreamMaxBytes(64<<10))
	}
	if st, err := buf.Stats(ctx); err != nil || st.Events == 0 || st.Bytes > uint64(edge.StreamMaxBytes(64<<10)) {
		t.Fatalf("full buffer stats %+v, %v", st, err)
	}
	if _, ok := buf.Reserve(1); ok {
		t.Fatal("Reserve admitted a byte into a full buffer")
	}
	info, _ = ingestStream.Info(ctx)
	if len(info.Config.Sources) != 0 {
		t.Fatalf("INGEST still has %d sources after RemoveSource", len(info.Config.Sources))
	}
}

// An edge whose data dir was lost starts a new buffer under its old name:
// the cell's source for the old one must not take the new buffer's first
// events for ones it already has. A probe found them acknowledged at the
// edge and dropped: NATS skips what a source sees at or below the last
// sequence it stored, and the new buffer's sequences start at 1 again.
// The new buffer's consumer delivers under its own incarnation, so the
// old source hears nothing of it; SetSources points the source at the new
// subject, and NATS sets it up afresh (the edge's stream was recreated),
// from the new buffer's start.
func TestANewBufferUnderAnOldNameLosesNothing(t *testing.T) {
	ctx := context.Background()
	leaf := freeAddr(t)
	cell := startNATS(t, natsd.Config{Name: "cell", LeafListen: leaf, LeafPassword: "pw"})
	if _, err := ingest.New(ctx, cell.JetStream(), destinations.NewRegistry(), ingest.Config{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	ingestStream, err := cell.JetStream().Stream(ctx, lanes.IngestStream)
	if err != nil {
		t.Fatal(err)
	}
	const name = "edge-r"
	run := func(first int, n int) (*natsd.Server, *edge.Buffer) {
		t.Helper()
		srv := startNATS(t, natsd.Config{Name: name, Domain: edge.Domain(name), LeafRemotes: []string{"nats-leaf://" + leaf}, LeafPassword: "pw"})
		poll.True(t, "the edge joined the cell", 20*time.Second, func() bool { return srv.LeafConnections() == 1 })
		buf, err := edge.Open(ctx, srv.JetStream(), edge.Config{Name: name, MaxBytes: 1 << 20, DedupWindow: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for i := first; i < first+n; i++ {
			msg := nats.NewMsg(edge.Subject(name, 3, "orders"))
			msg.Data = []byte(strconv.Itoa(i))
			msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("evt-%d", i))
			if _, err := srv.JetStream().PublishMsg(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
		return srv, buf
	}
	forwarded := func(step string, total uint64, buf *edge.Buffer) {
		t.Helper()
		poll.True(t, step, 30*time.Second, func() bool {
			info, err := ingestStream.Info(ctx)
			st, serr := buf.Stats(ctx)
			return err == nil && serr == nil && info.State.Msgs == total && st.Events == 0
		})
	}

	// What the agent's keeper does: read where the buffer delivers, set
	// the source to listen there.
	setSources := func() (added, removed, changed, waiting []string) {
		t.Helper()
		read, _ := edge.DeliverSubjects(ctx, cell.JetStream(), []string{name})
		added, removed, changed, waiting, err := edge.SetSources(ctx, cell.JetStream(), map[string]string{name: read[name]})
		if err != nil {
			t.Fatal(err)
		}
		return added, removed, changed, waiting
	}
	old, oldBuf := run(0, 5)
	if added, _, _, _ := setSources(); len(added) != 1 {
		t.Fatalf("the first buffer's source: added %v", added)
	}
	forwarded("the first buffer forwarded its 5 events", 5, oldBuf)
	old.Shutdown()

	_, newBuf := run(5, 5) // a fresh data dir: a new buffer, sequences from 1
	if added, removed, changed, waiting := setSources(); len(added) != 0 || len(removed) != 0 || len(waiting) != 0 || len(changed) != 1 || changed[0] != name {
		t.Fatalf("SetSources after the new buffer: added %v removed %v changed %v waiting %v; want %s changed", added, removed, changed, waiting, name)
	}
	forwarded("the new buffer forwarded its 5 events too", 10, newBuf)
	for seq := uint64(6); seq <= 10; seq++ {
		m, err := ingestStream.GetMsg(ctx, seq)
		if err != nil || string(m.Data) != strconv.Itoa(int(seq)-1) {
			t.Fatalf("INGEST message %d: %v %v, want event %d of the new buffer", seq, m, err, seq-1)
		}
	}
	// A second call finds the source it made right: nothing to do.
	if added, removed, changed, waiting := setSources(); len(added)+len(removed)+len(changed)+len(waiting) != 0 {
		t.Fatalf("SetSources again: %v %v %v %v, want nothing to do", added, removed, changed, waiting)
	}
}

// Owner names the edge whose buffer a store holds. A buffer opened again
// under another name (what edged now refuses) delivers under the old
// name, where the cell's source for the new one cannot listen: Owner
// still names the old one, and reading where it delivers says so
// (ErrOtherEdgesBuffer) rather than nothing.
func TestABufferUnderAnotherNameIsNamed(t *testing.T) {
	ctx := context.Background()
	leaf, dir := freeAddr(t), t.TempDir()
	cell := startNATS(t, natsd.Config{Name: "cell", LeafListen: leaf, LeafPassword: "pw"})
	first := startNATS(t, natsd.Config{Name: "lyon", DataDir: dir, Domain: edge.Domain("lyon")})
	if owner, err := edge.Owner(ctx, first.JetStream()); err != nil || owner != "" {
		t.Fatalf("Owner of a store without a buffer: %q, %v", owner, err)
	}
	if _, err := edge.Open(ctx, first.JetStream(), edge.Config{Name: "lyon", MaxBytes: 1 << 20, DedupWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if owner, err := edge.Owner(ctx, first.JetStream()); err != nil || owner != "lyon" {
		t.Fatalf("Owner of lyon's buffer: %q, %v", owner, err)
	}
	first.Shutdown()

	renamed := startNATS(t, natsd.Config{Name: "lyonr", DataDir: dir, Domain: edge.Domain("lyonr"), LeafRemotes: []string{"nats-leaf://" + leaf}, LeafPassword: "pw"})
	poll.True(t, "the edge joined the cell", 20*time.Second, func() bool { return renamed.LeafConnections() == 1 })
	if _, err := edge.Open(ctx, renamed.JetStream(), edge.Config{Name: "lyonr", MaxBytes: 1 << 20, DedupWindow: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if owner, err := edge.Owner(ctx, renamed.JetStream()); err != nil || owner != "lyon" {
		t.Fatalf("Owner of lyon's buffer opened as lyonr's: %q, %v; want lyon (whose name its consumer delivers under)", owner, err)
	}
	var subjects map[string]string
	var errs map[string]error
	poll.True(t, "the cell reads lyonr's buffer", 20*time.Second, func() bool {
		subjects, errs = edge.DeliverSubjects(ctx, cell.JetStream(), []string{"lyonr"})
		return errors.Is(errs["lyonr"], edge.ErrOtherEdgesBuffer)
	})
	if len(subjects) != 0 || !strings.Contains(errs["lyonr"].Error(), `"edge.lyon.forward.`) {
		t.Fatalf("DeliverSubjects of lyonr on lyon's buffer: %v, %v; want no subject and the old name's", subjects, errs)
	}
}

// StoredSize is what a message takes of the buffer's bytes as JetStream
// counts them, headers or not, so Reserve's count is the stream's own: a
// buffer read by Stats admits exactly what is left under MaxBytes.
func TestStoredSizeIsJetStreamsCount(t *testing.T) {
	ctx := context.Background()
	srv := startNATS(t, natsd.Config{Name: "edge-s", Domain: edge.Domain("edge-s")})
	const maxBytes = 1 << 20
	buf, err := edge.Open(ctx, srv.JetStream(), edge.Config{Name: "edge-s", MaxBytes: maxBytes, DedupWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for i := range 30 {
		msg := nats.NewMsg(edge.Subject("edge-s", i%4, "orders"+strings.Repeat("x", i)))
		msg.Data = []byte(strings.Repeat("d", i*37))
		if i%3 != 0 {
			msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("evt-%d", i))
			msg.Header.Set(edge.Header, "edge-s")
		}
		if i%5 == 0 {
			msg.Header.Add("X-Multi", "a")
			msg.Header.Add("X-Multi", "bb")
		}
		if _, err := srv.JetStream().PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		want += edge.StoredSize(msg.Subject, msg.Header, len(msg.Data))
	}
	st, err := buf.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if int64(st.Bytes) != want {
		t.Fatalf("the stream holds %d bytes; StoredSize counted %d", st.Bytes, want)
	}
	left := maxBytes - want
	if _, ok := buf.Reserve(left + 1); ok {
		t.Fatalf("Reserve admitted %d bytes with %d of %d held", left+1, want, maxBytes)
	}
	if _, ok := buf.Reserve(left); !ok {
		t.Fatalf("Reserve refused the %d bytes left under MaxBytes", left)
	}
}
