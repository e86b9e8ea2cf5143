package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/agent/ingest"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/lanes"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
)

// startIngest is an embedded server with the cell's INGEST stream, which
// sources a stream that is not an edge's (OTHER) and a stale edge's
// buffer ("gone").
func startIngest(t *testing.T) jetstream.JetStream {
	t.Helper()
	ctx := context.Background()
	srv, err := natsd.Start(natsd.Config{DataDir: t.TempDir()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	js := srv.JetStream()
	if _, err := ingest.New(ctx, js, destinations.NewRegistry(), ingest.Config{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"other.>"}}); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, lanes.IngestStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Sources = []*jetstream.StreamSource{{Name: "OTHER"}}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, err := edge.SetSources(ctx, js, map[string]string{"gone": edge.ForwardSubject("gone", "")}); err != nil {
		t.Fatal(err)
	}
	return js
}

// reachable is a keeper's reader that reaches every edge of names, whose
// buffers deliver under incarnation.
func reachable(incarnation string) func(context.Context, jetstream.JetStream, []string) (map[string]string, map[string]error) {
	return func(_ context.Context, _ jetstream.JetStream, names []string) (map[string]string, map[string]error) {
		out := map[string]string{}
		for _, n := range names {
			out[n] = edge.ForwardSubject(n, incarnation)
		}
		return out, nil
	}
}

// ingestSources are INGEST's sources: "edge:NAME" for an edge's, else the
// stream's name.
func ingestSources(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var out []string
	for _, src := range ingestSourceConfigs(t, js) {
		if name, ok := edge.SourceEdge(src); ok {
			out = append(out, "edge:"+name)
		} else {
			out = append(out, src.Name)
		}
	}
	slices.Sort(out)
	return out
}

func wantSources(t *testing.T, js jetstream.JetStream, step string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := ingestSources(t, js); !slices.Equal(got, want) {
		t.Fatalf("%s: INGEST sources %v, want %v", step, got, want)
	}
}

// The agent assigned partition 0 sets INGEST's edge sources to exactly the
// registered edges, on the snapshot and on each change of them; it never
// touches a source that is not an edge's; an agent not assigned partition
// 0, or one the control plane has not yet named the edges to, writes
// nothing.
func TestIngestSourcesFollowTheRegisteredEdges(t *testing.T) {
	ctx := context.Background()
	js := startIngest(t)
	e := newEdgeSources(js, time.Hour, slog.New(slog.DiscardHandler))
	e.read = reachable("1")

	e.follow(&rivorav1.WatchResponse{Partitions: []uint32{0, 1}})
	e.reconcile(ctx)
	wantSources(t, js, "before the control plane named the edges", "OTHER", "edge:gone")

	e.follow(&rivorav1.WatchResponse{Snapshot: true, Edges: []string{"b", "a", "b"}, Partitions: []uint32{0, 1}})
	e.reconcile(ctx)
	wantSources(t, js, "snapshot naming a and b", "OTHER", "edge:a", "edge:b")
	if got := gaugeValue(t); got != 2 {
		t.Fatalf("rivora_edge_sources = %v, want 2", got)
	}

	e.follow(&rivorav1.WatchResponse{Partitions: []uint32{0}})
	e.reconcile(ctx)
	wantSources(t, js, "a delta that does not change the edges", "OTHER", "edge:a", "edge:b")

	e.follow(&rivorav1.WatchResponse{EdgesChanged: true, Edges: []string{"b", "c"}, Partitions: []uint32{0}})
	e.reconcile(ctx)
	wantSources(t, js, "a removed, c registered", "OTHER", "edge:b", "edge:c")

	e.follow(&rivorav1.WatchResponse{EdgesChanged: true, Partitions: []uint32{0}})
	e.reconcile(ctx)
	wantSources(t, js, "no edge registered", "OTHER")
	if got := gaugeValue(t); got != 0 {
		t.Fatalf("rivora_edge_sources = %v, want 0", got)
	}

	// Partition 0 moved to another agent: this one writes nothing.
	e.follow(&rivorav1.WatchResponse{EdgesChanged: true, Edges: []string{"d"}, Partitions: []uint32{1}})
	e.reconcile(ctx)
	wantSources(t, js, "not partition 0's agent", "OTHER")
}

// The keeper sets the sources again by itself: one removed behind its back
// (a failed update, another agent's start racing) comes back within the
// repair interval, with no config change.
func TestIngestEdgeSourcesAreRepaired(t *testing.T) {
	js := startIngest(t)
	e := newEdgeSources(js, 50*time.Millisecond, slog.New(slog.DiscardHandler))
	e.read = reachable("1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	e.follow(&rivorav1.WatchResponse{Snapshot: true, Edges: []string{"a"}, Partitions: []uint32{0}})
	poll.True(t, "a's source added, gone's removed", 10*time.Second, func() bool {
		return slices.Equal(ingestSources(t, js), []string{"OTHER", "edge:a"})
	})
	if err := edge.RemoveSource(context.Background(), js, "a"); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "a's source back", 10*time.Second, func() bool {
		return slices.Equal(ingestSources(t, js), []string{"OTHER", "edge:a"})
	})
}

// An agent's start (ingest.New) keeps INGEST's sources, edges' and
// others'.
func TestAnAgentsStartKeepsIngestSources(t *testing.T) {
	js := startIngest(t)
	if _, err := ingest.New(context.Background(), js, destinations.NewRegistry(), ingest.Config{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	wantSources(t, js, "after a second start", "OTHER", "edge:gone")
}

// An edge the keeper cannot reach gets no source until it can (it forwards
// nothing meanwhile); one it reached before keeps its source while cut
// off; a buffer made anew (another incarnation) moves its source to the
// new subject.
func TestIngestEdgeSourcesFollowWhereBuffersDeliver(t *testing.T) {
	ctx := context.Background()
	js := startIngest(t)
	e := newEdgeSources(js, time.Hour, slog.New(slog.DiscardHandler))
	reach := map[string]string{}
	e.read = func(_ context.Context, _ jetstream.JetStream, names []string) (map[string]string, map[string]error) {
		return maps.Clone(reach), nil
	}
	e.follow(&rivorav1.WatchResponse{Snapshot: true, Edges: []string{"a"}, Partitions: []uint32{0}})
	if waiting := e.reconcile(ctx); !waiting {
		t.Fatal("an edge never reached: not waiting")
	}
	wantSources(t, js, "a not reached yet", "OTHER")
	if got := gaugeValue(t); got != 0 {
		t.Fatalf("rivora_edge_sources = %v, want 0", got)
	}

	reach["a"] = edge.ForwardSubject("a", "1")
	if waiting := e.reconcile(ctx); waiting {
		t.Fatal("a reached: still waiting")
	}
	wantSources(t, js, "a reached", "OTHER", "edge:a")
	if got := sourceSubject(t, js, "a"); got != edge.ForwardSubject("a", "1") {
		t.Fatalf("a's source listens on %q", got)
	}

	delete(reach, "a") // cut off: its source stays as it is
	if waiting := e.reconcile(ctx); waiting {
		t.Fatal("a cut off, with its source: waiting")
	}
	wantSources(t, js, "a cut off", "OTHER", "edge:a")

	reach["a"] = edge.ForwardSubject("a", "2") // a new buffer under the name
	e.reconcile(ctx)
	if got := sourceSubject(t, js, "a"); got != edge.ForwardSubject("a", "2") {
		t.Fatalf("after a's new buffer, its source listens on %q, want the new one", got)
	}
}

// ingestSourceConfigs are INGEST's sources as configured.
func ingestSourceConfigs(t *testing.T, js jetstream.JetStream) []*jetstream.StreamSource {
	t.Helper()
	s, err := js.Stream(context.Background(), lanes.IngestStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.Config.Sources
}

// sourceSubject is where INGEST's source of edge name listens.
func sourceSubject(t *testing.T, js jetstream.JetStream, name string) string {
	t.Helper()
	for _, src := range ingestSourceConfigs(t, js) {
		if n, ok := edge.SourceEdge(src); ok && n == name && src.Consumer != nil {
			return src.Consumer.DeliverSubject
		}
	}
	return ""
}

// gaugeValue is rivora_edge_sources now.
func gaugeValue(t *testing.T) float64 {
	t.Helper()
	var m dto.Metric
	if err := edgeSourcesGauge.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// An edge the keeper cannot read is warned of (it used to be logged at
// Debug only): one waiting for its first source once it has waited a
// minute, one whose buffer is another edge's at once; each at most every
// ten minutes, and an edge reached again is warned of afresh.
func TestUnreadEdgesAreWarnedOf(t *testing.T) {
	ctx := context.Background()
	js := startIngest(t)
	var logged strings.Builder
	e := newEdgeSources(js, time.Hour, slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn})))
	now := time.Now()
	e.now = func() time.Time { return now }
	reach := map[string]string{}
	unread := map[string]error{}
	e.read = func(context.Context, jetstream.JetStream, []string) (map[string]string, map[string]error) {
		return maps.Clone(reach), maps.Clone(unread)
	}
	warnings := func(step, edge string, want int) {
		t.Helper()
		if got := strings.Count(logged.String(), "level=WARN msg=\"an edge"); got != want || (want > 0 && !strings.Contains(logged.String(), "edge="+edge)) {
			t.Fatalf("%s: %d warnings about edges, want %d (of %s); log:\n%s", step, got, want, edge, logged.String())
		}
	}
	unread["far"] = errors.New("no responders")
	unread["lyonr"] = fmt.Errorf("%w: delivers to edge.lyon.forward.1", edge.ErrOtherEdgesBuffer)
	e.follow(&rivorav1.WatchResponse{Snapshot: true, Edges: []string{"far", "lyonr"}, Partitions: []uint32{0}})
	e.reconcile(ctx)
	warnings("first read", "lyonr", 1)
	if !strings.Contains(logged.String(), "another edge's buffer") {
		t.Fatalf("the other buffer's warning does not say what is wrong:\n%s", logged.String())
	}

	now = now.Add(edgeUnreachedGrace)
	e.reconcile(ctx)
	warnings("far waited a minute", "far", 2)
	if !strings.Contains(logged.String(), "no source in INGEST yet") || !strings.Contains(logged.String(), "no responders") {
		t.Fatalf("the unreached edge's warning does not say what is wrong:\n%s", logged.String())
	}
	now = now.Add(time.Minute)
	e.reconcile(ctx)
	warnings("a minute later", "far", 2)
	now = now.Add(edgeWarnEvery)
	e.reconcile(ctx)
	warnings("ten minutes later", "far", 4)

	// far is reached, then lost with its source kept (a cut: not warned
	// of); lyonr restarted under its data dir's name is reached as well.
	reach["far"], reach["lyonr"] = edge.ForwardSubject("far", "1"), edge.ForwardSubject("lyonr", "1")
	clear(unread)
	e.reconcile(ctx)
	delete(reach, "far")
	unread["far"] = errors.New("no responders")
	now = now.Add(2 * edgeUnreachedGrace)
	e.reconcile(ctx)
	warnings("reached", "far", 4)
	delete(reach, "lyonr")
	unread["lyonr"] = fmt.Errorf("%w: delivers to edge.lyon.forward.1", edge.ErrOtherEdgesBuffer)
	e.reconcile(ctx)
	warnings("lyonr on another buffer again, just after its last warning was cleared", "lyonr", 5)
}
