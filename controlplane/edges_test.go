package controlplane_test

import (
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// ---- harness ---------------------------------------------------------------

// edgeClient calls EdgeService with the cell token, as an edge does.
func (d *dev) edgeClient() rivorav1connect.EdgeServiceClient {
	return rivorav1connect.NewEdgeServiceClient(d.HTTPClient(), d.URL, d.As(d.Cell.String()))
}

// received is a config stream as a test reads it: its messages on a
// channel, closed when the stream ends; cancel ends it.
type received[M any] struct {
	msgs   <-chan *M
	cancel context.CancelFunc
}

// receive reads a server stream into a channel until it ends.
func receive[M any](cancel context.CancelFunc, stream *connect.ServerStreamForClient[M]) received[M] {
	ch := make(chan *M, 64)
	go func() {
		defer close(ch)
		defer stream.Close()
		for stream.Receive() {
			ch <- stream.Msg()
		}
	}()
	return received[M]{msgs: ch, cancel: cancel}
}

// watchEdge opens edge name's WatchEdge; the stream ends at cleanup.
func (d *dev) watchEdge(name string) received[rivorav1.WatchEdgeResponse] {
	d.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d.T.Cleanup(cancel)
	stream, err := d.edgeClient().WatchEdge(ctx, connect.NewRequest(&rivorav1.WatchEdgeRequest{EdgeName: name}))
	if err != nil {
		d.T.Fatalf("WatchEdge(%s): %v", name, err)
	}
	return receive(cancel, stream)
}

// watchAgent opens agent name's Watch; the stream ends at cleanup.
func (d *dev) watchAgent(name string) received[rivorav1.WatchResponse] {
	d.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d.T.Cleanup(cancel)
	stream, err := d.Agents.Watch(ctx, connect.NewRequest(&rivorav1.WatchRequest{AgentName: name, Address: "http://127.0.0.1:1"}))
	if err != nil {
		d.T.Fatalf("Watch(%s): %v", name, err)
	}
	return receive(cancel, stream)
}

// next is the stream's next message (the test fails if none comes).
func (r received[M]) next(t *testing.T, what string) *M {
	t.Helper()
	select {
	case m, ok := <-r.msgs:
		if !ok {
			t.Fatalf("%s: the stream ended", what)
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no message in 10s", what)
	}
	return nil
}

// until reads messages until one satisfies cond, and returns it.
func (r received[M]) until(t *testing.T, what string, cond func(*M) bool) *M {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m, ok := <-r.msgs:
			if !ok {
				t.Fatalf("%s: the stream ended", what)
			}
			if cond(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

// ended waits for the stream to end.
func (r received[M]) ended(t *testing.T, what string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-r.msgs:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("%s: the stream did not end within 10s", what)
		}
	}
}

func (d *dev) listEdges() []*rivorav1.EdgeStatus {
	d.T.Helper()
	resp, err := d.Admin.ListEdges(context.Background(), connect.NewRequest(&rivorav1.ListEdgesRequest{}))
	if err != nil {
		d.T.Fatalf("ListEdges: %v", err)
	}
	return resp.Msg.GetEdges()
}

func (d *dev) reportEdge(name string, b *rivorav1.EdgeBuffer) error {
	_, err := d.edgeClient().ReportEdge(context.Background(), connect.NewRequest(&rivorav1.ReportEdgeRequest{EdgeName: name, Buffer: b}))
	return err
}

func edgeStatusNames(s []*rivorav1.EdgeStatus) []string {
	var names []string
	for _, e := range s {
		names = append(names, e.GetName())
	}
	return names
}

// ---- tests -----------------------------------------------------------------

// An edge registers on its first WatchEdge (audited, one new config
// version); watching again changes nothing; the registration outlives the
// watch and a restart of the control plane.
func TestEdgeRegistersOnFirstWatchAndPersists(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startDev(t, dir, false)
	versionBefore := d.configVersion()

	first := d.watchEdge("berlin")
	if cfg := first.next(t, "berlin's snapshot").GetConfig(); !cfg.GetSnapshot() {
		t.Fatalf("berlin's first message is not a snapshot: %v", cfg)
	}
	edges := d.listEdges()
	if len(edges) != 1 || edges[0].GetName() != "berlin" || !edges[0].GetWatching() || edges[0].GetConnected() || edges[0].GetBuffer() != nil || edges[0].GetRegisteredAt() == nil {
		t.Fatalf("ListEdges after berlin's first watch: %v; want berlin, watching, not connected (no report yet)", edges)
	}
	registeredAt := edges[0].GetRegisteredAt().AsTime()
	version := d.configVersion()
	if version != versionBefore+1 {
		t.Fatalf("registration took the config version from %d to %d, want one new version", versionBefore, version)
	}

	again := d.watchEdge("berlin")
	again.next(t, "berlin's second snapshot")
	if v := d.configVersion(); v != version {
		t.Fatalf("a registered edge's second watch changed the config version %d → %d", version, v)
	}
	audit, err := d.Admin.ListAudit(context.Background(), connect.NewRequest(&rivorav1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	registrations := 0
	for _, e := range audit.Msg.GetEntries() {
		if e.GetAction() == "edge.register" && strings.Contains(e.GetDetail(), "berlin") {
			registrations++
		}
	}
	if registrations != 1 {
		t.Fatalf("%d edge.register entries for berlin in the audit log, want 1", registrations)
	}

	first.cancel()
	again.cancel()
	poll.True(t, "berlin not watching once its streams ended", 10*time.Second, func() bool {
		e := d.listEdges()
		return len(e) == 1 && !e[0].GetWatching()
	})

	token := d.AdminToken
	d.stop()
	restarted := &dev{rig.StartDev(t, dir, rig.Options{NoAgent: true, Token: token})}
	edges = restarted.listEdges()
	if len(edges) != 1 || edges[0].GetName() != "berlin" || edges[0].GetWatching() || !edges[0].GetRegisteredAt().AsTime().Equal(registeredAt) {
		t.Fatalf("after a restart: %v; want berlin, registered at %v, not watching", edges, registeredAt)
	}
}

func (d *dev) configVersion() uint64 {
	d.T.Helper()
	resp, err := d.Admin.GetConfigStatus(context.Background(), connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		d.T.Fatalf("GetConfigStatus: %v", err)
	}
	return resp.Msg.GetVersion()
}

// The edge's config has no signing secret, previous secret or header
// value of any destination or subscription (fingerprints instead), no
// partitions and no edge names; it keeps the API tokens' hashes (the edge
// authenticates publishers) and the partition count (its subjects name
// the partition). The agents' feed keeps the secrets, and the edge's
// deltas stay deltas.
func TestEdgeConfigIsRedacted(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	const destHeader, subHeader = "Bearer dest-header-value-7f3a", "sub-header-value-91bc"
	subSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("the subscription's own secret!"))
	subRotated := "whsec_" + base64.StdEncoding.EncodeToString([]byte("the subscription's next secret"))
	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL, Secret: secret,
		Headers: []*rivorav1.Header{{Name: "Authorization", Value: destHeader}}})
	if _, err := d.rotate(&rivorav1.RotateDestinationSecretRequest{DestinationId: "orders", Secret: rotated, Grace: durationpb.New(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	sub := d.subscribe(d.AdminToken, &rivorav1.CreateSubscriptionRequest{CustomerId: "c1", DestinationId: "orders", Types: []string{"*"}, Secret: subSecret,
		Headers: []*rivorav1.Header{{Name: "X-Key", Value: subHeader}}})
	if _, err := d.subs(d.AdminToken).RotateSubscriptionSecret(context.Background(), connect.NewRequest(&rivorav1.RotateSubscriptionSecretRequest{
		Id: sub.GetId(), Secret: subRotated, Grace: durationpb.New(time.Hour)})); err != nil {
		t.Fatal(err)
	}
	secrets := []string{secret, rotated, subSecret, subRotated, destHeader, subHeader}
	for _, s := range slices.Clone(secrets) {
		secrets = append(secrets, strings.TrimPrefix(s, "whsec_"))
	}

	agentCfg := watchOnce(t, d)
	if dests := agentCfg.GetDestinations(); len(dests) != 1 || dests[0].GetSecret() != rotated || dests[0].GetPreviousSecret() != secret || dests[0].GetHeaders()[0].GetValue() != destHeader {
		t.Fatalf("the agents' feed lost the destination's secrets: %v", dests)
	}

	edge := d.watchEdge("lyon")
	cfg := edge.next(t, "lyon's snapshot").GetConfig()
	raw, err := protojson.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if strings.Contains(string(raw), s) {
			t.Errorf("the edge's config holds the secret %q: %s", s, raw)
		}
	}
	dests, subs := cfg.GetDestinations(), cfg.GetSubscriptions()
	if len(dests) != 1 || dests[0].GetSecretFingerprint() != auth.Fingerprint(rotated) || dests[0].GetPreviousSecretFingerprint() != auth.Fingerprint(secret) ||
		dests[0].GetHeaders()[0].GetValueFingerprint() != auth.Fingerprint(destHeader) {
		t.Errorf("the edge's destination %v, want its fingerprints", dests)
	}
	if len(subs) != 1 || subs[0].GetSecretFingerprint() != auth.Fingerprint(subRotated) || subs[0].GetPreviousSecretFingerprint() != auth.Fingerprint(subSecret) ||
		subs[0].GetHeaders()[0].GetValueFingerprint() != auth.Fingerprint(subHeader) || subs[0].GetCustomerId() != "c1" {
		t.Errorf("the edge's subscription %v, want it with fingerprints", subs)
	}
	if len(cfg.GetTokens()) == 0 || cfg.GetTokens()[0].GetHash() == "" || !cfg.GetTokensChanged() {
		t.Errorf("the edge's config has tokens %v, want the API tokens' hashes", cfg.GetTokens())
	}
	if cfg.GetPartitionCount() != 4 || len(cfg.GetPartitions()) != 0 || len(cfg.GetEdges()) != 0 || cfg.GetEdgesChanged() {
		t.Errorf("the edge's config: partition count %d, partitions %v, edges %v (changed %v); want 4, none, none",
			cfg.GetPartitionCount(), cfg.GetPartitions(), cfg.GetEdges(), cfg.GetEdgesChanged())
	}

	d.create(&rivorav1.CreateDestinationRequest{Id: "invoices", Url: sink(t).URL, Secret: secret})
	delta := edge.until(t, "the edge's delta with invoices", func(m *rivorav1.WatchEdgeResponse) bool {
		return len(m.GetConfig().GetDestinations()) > 0
	}).GetConfig()
	if delta.GetSnapshot() || len(delta.GetDestinations()) != 1 || delta.GetDestinations()[0].GetId() != "invoices" || delta.GetDestinations()[0].GetSecret() != "" {
		t.Fatalf("the edge's delta after creating invoices: %v; want invoices alone, without its secret", delta)
	}
}

// An edge never owns a partition, even named like an agent, and never
// takes one from the agents.
func TestEdgeGetsNoPartitions(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	agent := d.watchAgent("a1")
	if p := agent.next(t, "a1's snapshot").GetPartitions(); !slices.Equal(p, []uint32{0, 1, 2, 3}) {
		t.Fatalf("agent a1 was assigned %v, want every partition", p)
	}
	for _, name := range []string{"a1", "aaa"} {
		cfg := d.watchEdge(name).next(t, "edge "+name+"'s snapshot").GetConfig()
		if len(cfg.GetPartitions()) != 0 {
			t.Fatalf("edge %s was assigned partitions %v", name, cfg.GetPartitions())
		}
	}
	resp, err := d.Admin.GetConfigStatus(context.Background(), connect.NewRequest(&rivorav1.GetConfigStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	agents := resp.Msg.GetAgents()
	if len(agents) != 1 || agents[0].GetName() != "a1" || !slices.Equal(agents[0].GetAssignedPartitions(), []uint32{0, 1, 2, 3}) {
		t.Fatalf("agents %v with edges watching; want a1 alone with every partition", agents)
	}
	if names := edgeStatusNames(resp.Msg.GetEdges()); !slices.Equal(names, []string{"a1", "aaa"}) {
		t.Fatalf("GetConfigStatus edges %v, want a1 and aaa", names)
	}
}

// The agents' feed carries the registered edges' names, sorted, on the
// snapshot and whenever they change (edges_changed), and only then.
func TestAgentsFeedCarriesEdges(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	agent := d.watchAgent("a1")
	if s := agent.next(t, "a1's snapshot"); !s.GetEdgesChanged() || len(s.GetEdges()) != 0 {
		t.Fatalf("snapshot edges %v (changed %v), want none, changed", s.GetEdges(), s.GetEdgesChanged())
	}
	d.watchEdge("oslo").next(t, "oslo's snapshot")
	agent.until(t, "the agent gets [oslo]", func(m *rivorav1.WatchResponse) bool {
		return m.GetEdgesChanged() && slices.Equal(m.GetEdges(), []string{"oslo"})
	})
	bergen := d.watchEdge("bergen")
	bergen.next(t, "bergen's snapshot")
	agent.until(t, "the agent gets [bergen oslo]", func(m *rivorav1.WatchResponse) bool {
		return m.GetEdgesChanged() && slices.Equal(m.GetEdges(), []string{"bergen", "oslo"})
	})

	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL})
	m := agent.until(t, "the agent gets orders", func(m *rivorav1.WatchResponse) bool { return len(m.GetDestinations()) > 0 })
	if m.GetEdgesChanged() || len(m.GetEdges()) != 0 {
		t.Fatalf("a destination's delta carries edges %v (changed %v)", m.GetEdges(), m.GetEdgesChanged())
	}

	// Reported connected with nothing buffered: removed without --force.
	if err := d.reportEdge("bergen", &rivorav1.EdgeBuffer{CellConnected: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Admin.RemoveEdge(context.Background(), connect.NewRequest(&rivorav1.RemoveEdgeRequest{Name: "bergen"})); err != nil {
		t.Fatalf("RemoveEdge(bergen): %v", err)
	}
	agent.until(t, "the agent gets [oslo] again", func(m *rivorav1.WatchResponse) bool {
		return m.GetEdgesChanged() && slices.Equal(m.GetEdges(), []string{"oslo"})
	})
	bergen.ended(t, "bergen's watch after its removal")
}

// An edge's reports make its status; RemoveEdge is refused while the
// last report counts unforwarded events, unless forced, and is audited.
func TestRemoveEdgeRefusedWithBufferedEvents(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	if err := d.reportEdge("paris", &rivorav1.EdgeBuffer{CellConnected: true}); connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "paris") {
		t.Fatalf("a report of an unregistered edge: %v, want NotFound naming it", err)
	}
	stream, err := d.edgeClient().WatchEdge(context.Background(), connect.NewRequest(&rivorav1.WatchEdgeRequest{EdgeName: "no.dots"}))
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
	}
	wantCode(t, "WatchEdge of a bad name", err, connect.CodeInvalidArgument, "edge_name", "'.'")

	edge := d.watchEdge("paris")
	edge.next(t, "paris's snapshot")
	oldest := time.Now().Add(-90 * time.Second).Truncate(time.Second)
	if err := d.reportEdge("paris", &rivorav1.EdgeBuffer{CellConnected: true, BufferedEvents: 7, BufferedBytes: 700, OldestBuffered: timestamppb.New(oldest), ForwardedTotal: 40}); err != nil {
		t.Fatalf("ReportEdge: %v", err)
	}
	got, err := d.Admin.GetEdge(context.Background(), connect.NewRequest(&rivorav1.GetEdgeRequest{Name: "paris"}))
	if err != nil {
		t.Fatal(err)
	}
	e := got.Msg.GetEdge()
	if !e.GetConnected() || !e.GetWatching() || e.GetBuffer().GetBufferedEvents() != 7 || e.GetBuffer().GetForwardedTotal() != 40 || !e.GetBuffer().GetOldestBuffered().AsTime().Equal(oldest) {
		t.Fatalf("GetEdge(paris) = %v; want connected, watching, its report", e)
	}

	_, err = d.Admin.RemoveEdge(context.Background(), connect.NewRequest(&rivorav1.RemoveEdgeRequest{Name: "paris"}))
	wantCode(t, "RemoveEdge with unforwarded events", err, connect.CodeFailedPrecondition, "paris", "7 unforwarded events", "--force")
	if names := edgeStatusNames(d.listEdges()); !slices.Equal(names, []string{"paris"}) {
		t.Fatalf("a refused removal changed the edges: %v", names)
	}
	if _, err := d.Admin.RemoveEdge(context.Background(), connect.NewRequest(&rivorav1.RemoveEdgeRequest{Name: "paris", Force: true})); err != nil {
		t.Fatalf("RemoveEdge --force: %v", err)
	}
	_, err = d.Admin.GetEdge(context.Background(), connect.NewRequest(&rivorav1.GetEdgeRequest{Name: "paris"}))
	wantCode(t, "GetEdge of a removed edge", err, connect.CodeNotFound, `"paris"`, "edges list")
	_, err = d.Admin.RemoveEdge(context.Background(), connect.NewRequest(&rivorav1.RemoveEdgeRequest{Name: "paris"}))
	wantCode(t, "RemoveEdge of a removed edge", err, connect.CodeNotFound, `"paris"`)
	edge.ended(t, "paris's watch after its removal")
	if err := d.reportEdge("paris", &rivorav1.EdgeBuffer{}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a report of a removed edge: %v, want NotFound", err)
	}

	audit, err := d.Admin.ListAudit(context.Background(), connect.NewRequest(&rivorav1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	entries := audit.Msg.GetEntries()
	last := entries[len(entries)-1]
	if last.GetAction() != "edge.remove" || last.GetAuthor() != controlplane.BootstrapTokenName || !strings.Contains(last.GetDetail(), "paris") || !strings.Contains(last.GetDetail(), "7 unforwarded") {
		t.Fatalf("last audit entry %v, want edge.remove of paris by the bootstrap token, forced over 7 events", last)
	}
}

// RemoveEdge is refused (unless forced) while the control plane cannot
// tell the edge's buffer is empty, not only while its last report counts
// unforwarded events: before its first report (a new edge, or any edge
// after the control plane restarted), and once that report is stale (an
// edge cut off from the cell keeps accepting: its last "0" says nothing
// of what it holds now). The refusal says why and that --force removes
// it anyway; the forced removal's audit entry says what was not known.
func TestRemoveEdgeRefusedWhileItsBufferIsUnknown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startDev(t, dir, false)
	remove := func(d *dev, force bool) error {
		_, err := d.Admin.RemoveEdge(context.Background(), connect.NewRequest(&rivorav1.RemoveEdgeRequest{Name: "lyon", Force: force}))
		return err
	}
	lyon := d.watchEdge("lyon")
	lyon.next(t, "lyon's snapshot")
	wantCode(t, "RemoveEdge before the edge's first report", remove(d, false), connect.CodeFailedPrecondition, "lyon", "has not reported", "--force")

	// Its link to the cell up, nothing buffered; then cut: its reports stop.
	if err := d.reportEdge("lyon", &rivorav1.EdgeBuffer{CellConnected: true}); err != nil {
		t.Fatal(err)
	}
	lyon.cancel()
	var status *rivorav1.EdgeStatus
	poll.True(t, "lyon's report stale", 20*time.Second, func() bool {
		got, err := d.Admin.GetEdge(context.Background(), connect.NewRequest(&rivorav1.GetEdgeRequest{Name: "lyon"}))
		if err != nil {
			t.Fatal(err)
		}
		status = got.Msg.GetEdge()
		return status.GetReportStale()
	})
	if status.GetBuffer().GetBufferedEvents() != 0 {
		t.Fatalf("lyon's stale report: %v, want its last figures (0 buffered)", status)
	}
	wantCode(t, "RemoveEdge with a stale report of an empty buffer", remove(d, false), connect.CodeFailedPrecondition, "lyon", "stale", "0 unforwarded events", "keeps accepting", "--force")

	// A restart forgets every report: the buffer is unknown, not empty.
	token := d.AdminToken
	d.stop()
	restarted := &dev{rig.StartDev(t, dir, rig.Options{NoAgent: true, Token: token})}
	got, err := restarted.Admin.GetEdge(context.Background(), connect.NewRequest(&rivorav1.GetEdgeRequest{Name: "lyon"}))
	if err != nil {
		t.Fatal(err)
	}
	if e := got.Msg.GetEdge(); e.GetBuffer() != nil || e.GetLastSeen() != nil || e.GetConnected() {
		t.Fatalf("lyon after a restart of the control plane: %v; want no report, never seen", e)
	}
	wantCode(t, "RemoveEdge after a restart, before the edge's next report", remove(restarted, false), connect.CodeFailedPrecondition, "lyon", "has not reported", "--force")
	if names := edgeStatusNames(restarted.listEdges()); !slices.Equal(names, []string{"lyon"}) {
		t.Fatalf("a refused removal changed the edges: %v", names)
	}
	if err := remove(restarted, true); err != nil {
		t.Fatalf("RemoveEdge --force: %v", err)
	}
	audit, err := restarted.Admin.ListAudit(context.Background(), connect.NewRequest(&rivorav1.ListAuditRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	entries := audit.Msg.GetEntries()
	if last := entries[len(entries)-1]; last.GetAction() != "edge.remove" || !strings.Contains(last.GetDetail(), "forced") || !strings.Contains(last.GetDetail(), "has not reported") {
		t.Fatalf("last audit entry %v, want lyon's forced removal saying its buffer was unknown", last)
	}
}
