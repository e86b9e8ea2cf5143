package edged_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/edge/edged"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// watchWhile calls check every 20 ms while fn runs (the one poll loop,
// until fn has returned), then once more.
func watchWhile(check func(), fn func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = poll.Until(ctx, 0, 20*time.Millisecond, func() error {
			check()
			return errors.New("watching")
		})
	}()
	fn()
	cancel()
	<-done
	check()
}

// Two edges started under one name against one real cell (`rivora dev`
// in process): the second is refused at its start, once it has waited
// for the name in case the holder was its own previous process, naming
// the name and what to do, and it never joins the cell; the first keeps
// its link to the cell throughout (NATS drops a leaf connection for a
// newer one of the same server name: the two would take turns, as they
// did) and its events are delivered. Once the first stopped, the edge
// restarted on its data dir under the name starts and delivers again.
func TestASecondEdgeUnderATakenNameIsRefused(t *testing.T) {
	ctx := context.Background()
	leaf, natsAddr := freeAddr(t), freeAddr(t)
	d := rig.StartDev(t, t.TempDir(), rig.Options{Agent: func(c *agent.Config) { c.LeafListen, c.NATSListen = leaf, natsAddr }})
	p := partner.New(t, partner.Options{})
	d.Create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: p.URL()})
	token := d.Token(rivorav1.Role_ROLE_PUBLISHER, "acme")
	cfg := func(dataDir string) edged.Config {
		return edged.Config{
			Name: "lyon", DataDir: dataDir, CellLeaf: []string{"nats-leaf://" + leaf}, ControlPlanes: []string{d.URL},
			MaxBuffer: 1 << 20, BufferMaxAge: time.Hour,
		}
	}
	firstDir := t.TempDir()
	first := startEdgeWithKeys(t, cfg(firstDir), auth.NewKeys(d.Cell))
	poll.True(t, "the first edge applied its config and joined the cell", 15*time.Second, func() bool {
		return first.Healthy() == nil && first.Status().CellConnected
	})

	second := cfg(t.TempDir())
	second.Keys = auth.NewKeys(d.Cell)
	var (
		refusal error
		dropped atomic.Bool
	)
	began := time.Now()
	watchWhile(func() {
		if !first.Status().CellConnected {
			dropped.Store(true)
		}
	}, func() {
		e, err := edged.New(ctx, second, slog.New(slog.DiscardHandler))
		if err == nil {
			_ = e.Run(canceled())
			err = errors.New("started")
		}
		refusal = err
	})
	t.Logf("the second edge refused after %s: %v", time.Since(began).Round(time.Millisecond), refusal)
	if md, ok := errkind.Info(refusal, errkind.EdgeNameInUseReason); !ok || md["edge"] != "lyon" {
		t.Fatalf("a second edge under lyon: %v; want refused at its start, reason %s naming lyon", refusal, errkind.EdgeNameInUseReason)
	}
	for _, want := range []string{`edge name "lyon" is in use by another running edge`, "another --name", "stop the other one"} {
		if !strings.Contains(refusal.Error(), want) {
			t.Fatalf("the refusal %q does not say %q", refusal, want)
		}
	}
	if dropped.Load() {
		t.Fatal("the first edge's link to the cell dropped while a second edge under its name started")
	}

	nc, err := nats.Connect("nats://" + natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	addSourceOnceReachable(t, js, "lyon")
	delivered := func(e *runningEdge, what string) {
		t.Helper()
		resp, err := e.publish(token, "user-1", []byte(`{"from":"lyon"}`))
		if err != nil {
			t.Fatalf("publish through %s: %v", what, err)
		}
		poll.True(t, "the partner received the event published through "+what, 30*time.Second, func() bool { return p.OK(resp.GetEventId()) > 0 })
	}
	delivered(first, "the first edge")

	// Stopped, the name lapses: the edge restarted under it (on its data
	// dir) gets it, within its wait.
	first.stop()
	again := startEdgeWithKeys(t, cfg(firstDir), auth.NewKeys(d.Cell))
	poll.True(t, "the edge restarted under the name joined the cell", 15*time.Second, func() bool { return again.Status().CellConnected })
	delivered(again, "the restarted edge")
}

// An edge refused its name at its start holds its leaf connection while
// it waits for the name (the holder may be its own previous process,
// whose name lapses): the cell sees none until the control plane
// confirms the name, and the edge joins it then.
func TestAnEdgeJoinsTheCellOnceItsNameIsConfirmed(t *testing.T) {
	cp, cpServer := startControlPlane(t)
	cp.refuse.Store(true)
	leaf := freeAddr(t)
	cell := startCell(t, leaf, t.TempDir())
	cfg := edged.Config{
		Name: "edge-wait", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + leaf}, ControlPlanes: []string{cpServer.URL},
		MaxBuffer: 1 << 20, BufferMaxAge: time.Hour, Keys: auth.NewKeys(auth.CellTokenOf(cellSecret)),
	}
	go func() {
		_ = poll.Until(context.Background(), 30*time.Second, 10*time.Millisecond, func() error {
			if cp.refused.Load() < 3 {
				return errors.New("fewer than 3 refusals")
			}
			cp.refuse.Store(false) // the previous holder's name lapsed
			return nil
		})
	}()
	var (
		e      *edged.Edge
		err    error
		joined atomic.Bool
	)
	// Joined while refused: the refusal read first. Once the name is
	// confirmed (inside New), the edge may join before New returns.
	watchWhile(func() {
		if cp.refuse.Load() && cell.LeafConnections() > 0 {
			joined.Store(true)
		}
	}, func() {
		e, err = edged.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	})
	if err != nil {
		t.Fatalf("the name was confirmed after %d refusals, yet the edge did not start: %v", cp.refused.Load(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	if joined.Load() {
		t.Fatal("the edge joined the cell while its name was refused")
	}
	poll.True(t, "the edge joins the cell once its name is confirmed", 10*time.Second, func() bool { return cell.LeafConnections() == 1 })
}

// An edge that joined the cell and is then refused its name (another
// process took it while this one's calls did not reach the control
// plane) stops: Run returns why, naming the name, and the edge leaves
// the cell.
func TestAnEdgeThatLosesItsNameStops(t *testing.T) {
	cp, cpServer := startControlPlane(t)
	leaf := freeAddr(t)
	cell := startCell(t, leaf, t.TempDir())
	e, err := edged.New(context.Background(), edged.Config{
		Name: "edge-lost", DataDir: t.TempDir(), CellLeaf: []string{"nats-leaf://" + leaf}, ControlPlanes: []string{cpServer.URL},
		MaxBuffer: 1 << 20, BufferMaxAge: time.Hour, Keys: auth.NewKeys(auth.CellTokenOf(cellSecret)),
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	poll.True(t, "the edge joined the cell", 10*time.Second, func() bool { return cell.LeafConnections() == 1 })

	cp.refuse.Store(true) // its next report is refused
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("an edge refused its name after it joined the cell still runs")
	}
	if md, ok := errkind.Info(err, errkind.EdgeNameInUseReason); !ok || md["edge"] != "edge-lost" || !strings.Contains(err.Error(), "another edge process took this edge's name") {
		t.Fatalf("Run: %v; want it stopped, saying another process took the name edge-lost", err)
	}
	poll.True(t, "the edge left the cell", 10*time.Second, func() bool { return cell.LeafConnections() == 0 })
}

// refusalLog is a logger that calls refused when the edge logs that
// another running edge has its name (its first refusal).
func refusalLog(refused func()) *slog.Logger {
	return slog.New(refusalHandler{refused})
}

type refusalHandler struct{ refused func() }

func (h refusalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h refusalHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h refusalHandler) WithGroup(string) slog.Handler            { return h }
func (h refusalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "another running edge has this edge's name") {
		h.refused()
	}
	return nil
}

// An edge restarted on its data dir is the name's holder still (the
// instance id is the data dir's): the control plane takes it back at
// once, where it used to refuse it for up to 6 s, its previous process's
// claim not lapsed, the restarted edge serving nothing meanwhile. An
// edge on another data dir under the name is still refused.
func TestAnEdgeRestartedOnItsDataDirKeepsItsName(t *testing.T) {
	d := rig.StartDev(t, t.TempDir(), rig.Options{})
	cfg := func(dataDir string) edged.Config {
		return edged.Config{
			Name: "nantes", DataDir: dataDir, CellLeaf: []string{"nats-leaf://" + freeAddr(t)}, ControlPlanes: []string{d.URL},
			MaxBuffer: 1 << 20, BufferMaxAge: time.Hour, Keys: auth.NewKeys(d.Cell),
		}
	}
	// start starts an edge on dataDir, its start ended at the first
	// refusal of its name.
	start := func(dataDir string) (*edged.Edge, bool, error) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var refused atomic.Bool
		e, err := edged.New(ctx, cfg(dataDir), refusalLog(func() { refused.Store(true); cancel() }))
		return e, refused.Load(), err
	}
	dir := t.TempDir()
	startEdgeWithKeys(t, cfg(dir), auth.NewKeys(d.Cell)).stop()
	e, refused, err := start(dir) // right after: the stopped process's claim has not lapsed
	if refused || err != nil {
		t.Fatalf("an edge restarted on its data dir: refused %v, %v; want its name at once", refused, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	if other, refused, err := start(t.TempDir()); err == nil || !refused {
		if err == nil {
			_ = other.Run(canceled())
		}
		t.Fatalf("an edge on another data dir under a running edge's name: refused %v, %v; want refused", refused, err)
	}
}

// An edge started cut off from its control plane takes events from the
// config it kept; once the control plane is reached and refuses its
// name, it takes no more (unavailable, reason EDGE_NAME_IN_USE), where
// it went on acknowledging events that would stay in its data dir, and
// it stops saying how many events its buffer holds unforwarded, in
// which data dir, and what to do.
func TestAnEdgeRefusedItsNameTakesNoMoreEventsAndSaysWhatItHolds(t *testing.T) {
	cp, cpServer := startControlPlane(t)
	var down atomic.Bool
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "the control plane is out of reach", http.StatusServiceUnavailable)
			return
		}
		cpServer.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	dir := t.TempDir()
	cfg := edged.Config{
		Name: "edge-dup", DataDir: dir, CellLeaf: []string{"nats-leaf://" + freeAddr(t)}, ControlPlanes: []string{front.URL},
		MaxBuffer: 1 << 20, BufferMaxAge: time.Hour,
	}
	first := startEdge(t, cfg)
	poll.True(t, "the edge applied the control plane's config", 10*time.Second, func() bool { return first.Healthy() == nil })
	first.stop()

	down.Store(true)
	cp.refuse.Store(true) // another edge took the name meanwhile
	cfg.Keys = auth.NewKeys(auth.CellTokenOf(cellSecret))
	e, err := edged.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("an edge started cut off from its control plane: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	mux := http.NewServeMux()
	e.Handle(mux)
	api := httptest.NewServer(mux)
	t.Cleanup(api.Close)
	r := &runningEdge{Edge: e, api: api}
	for i := range 2 {
		if _, err := r.publish(publisherToken, "user-1", []byte(`{"n":`+strconv.Itoa(i)+`}`)); err != nil {
			t.Fatalf("publish through an edge cut off from its control plane: %v", err)
		}
	}

	down.Store(false)
	var refusal error
	acked := 2 // until it hears of the refusal
	poll.True(t, "the edge refuses events once its name is refused", 20*time.Second, func() bool {
		if _, refusal = r.publish(publisherToken, "user-1", []byte(`{"n":2}`)); refusal == nil {
			acked++
		}
		return refusal != nil
	})
	if _, ok := errkind.Info(refusal, errkind.EdgeNameInUseReason); connect.CodeOf(refusal) != connect.CodeUnavailable || !ok {
		t.Fatalf("a publish to an edge refused its name: %v; want unavailable, reason %s", refusal, errkind.EdgeNameInUseReason)
	}
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("an edge refused its name still runs")
	}
	for _, want := range []string{fmt.Sprintf("holds %d events", acked), "--data-dir " + dir, "--name edge-dup --data-dir " + dir} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("Run: %v; want it to say %q", err, want)
		}
	}
}
