package controlplane

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/rivora/rivora/e2e/consultest"
	"github.com/rivora/rivora/internal/consullock"
	"github.com/rivora/rivora/testkit/poll"
)

// A leader lock held by one of the control plane's own orphans (a session
// it gave up that Consul could not end, as while Consul restarts) is not
// waited out until Consul expires it: the control plane ends it and leads
// (a probe found a cell without a leader for ~30 s after a Consul
// restart). The orphan here would hold the lock for a day.
func TestAnOrphanDoesNotHoldTheLock(t *testing.T) {
	srv := consultest.Start(t)
	cfg := api.DefaultConfig()
	cfg.Address, cfg.Scheme = srv.HTTPAddr, "http"
	client, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	orphan, err := consullock.CreateSession(ctx, client, consullock.SessionConfig{Name: "rivora-controlplane http://cp", TTL: 24 * time.Hour, LockDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := orphan.Lock(ctx, ConsulLeaderKey, []byte("http://cp")); err != nil {
		t.Fatalf("the orphan takes the lock: %v", err)
	}
	e := newElection(client, "http://cp", slog.New(slog.DiscardHandler), func(context.Context, string) error { return nil })
	e.orphans = append(e.orphans, orphan)
	s, err := e.createSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go e.campaign(ctx, s)
	poll.True(t, "leading, its orphan's lock ended", 15*time.Second, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.leading
	})
	if info, _, err := client.Session().Info(orphan.ID(), nil); err != nil || info != nil {
		t.Fatalf("the orphan session: %v, %v; want ended", info, err)
	}
}
