package natsd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/testkit/poll"
)

// The member that leads the cluster's meta group hands it to a peer
// while it still runs: the peer leads at once, and stream creates sent
// through the member that handed it over are answered.
func TestHandOverMetaMovesItToAPeer(t *testing.T) {
	servers := startCell(t, []natsd.Config{{Password: password}, {Password: password}, {Password: password}})
	byName := map[string]*natsd.Server{}
	for i, s := range servers {
		byName[fmt.Sprintf("a%d", i+1)] = s
	}
	leaderName := func() string {
		for name, s := range byName {
			if natsd.LeadsMeta(s) {
				return name
			}
		}
		return ""
	}
	var was string
	poll.True(t, "a meta leader", 15*time.Second, func() bool { was = leaderName(); return was != "" })

	start := time.Now()
	to, err := byName[was].HandOverMeta(2 * time.Second)
	if err != nil || to == "" || to == was {
		t.Fatalf("%s handed the meta leadership to %q (%v), want a peer", was, to, err)
	}
	t.Logf("%s handed the meta leadership to %s in %s", was, to, time.Since(start))
	if natsd.LeadsMeta(byName[was]) {
		t.Fatalf("%s still leads the meta group after handing it to %s", was, to)
	}
	// Its JetStream layer learns of its lead just after its Raft group.
	poll.True(t, to+", heard of as the new meta leader, leading", time.Second, func() bool { return natsd.LeadsMeta(byName[to]) })
	// A server that does not lead has nothing to hand.
	if again, err := byName[was].HandOverMeta(2 * time.Second); again != "" || err != nil {
		t.Fatalf("%s, no longer leading, handed the meta leadership to %q (%v)", was, again, err)
	}
	// The cell answers creates at once, through the old leader too.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := byName[was].JetStream().CreateStream(ctx, jetstream.StreamConfig{Name: "AFTERMETA", Subjects: []string{"aftermeta.>"}, Replicas: 3}); err != nil {
		t.Fatalf("create a stream through %s after its meta handover: %v", was, err)
	}
}

// A lone server, and a server without a password (no system user),
// have no meta leadership to hand.
func TestHandOverMetaNothingToHand(t *testing.T) {
	alone := start(t, natsd.Config{Password: password})
	open := startCell(t, []natsd.Config{{}, {}, {}})
	for name, s := range map[string]*natsd.Server{"alone": alone, "a1 (open)": open[0], "a2 (open)": open[1], "a3 (open)": open[2]} {
		if to, err := s.HandOverMeta(time.Hour); to != "" || err != nil {
			t.Errorf("%s handed the meta leadership to %q (%v), want nothing", name, to, err)
		}
	}
	if _, pw := natsd.SystemUser(open[0]); pw != "" {
		t.Errorf("a server without a password has a system user")
	}
}

// The system user, whose password never leaves the process, logs in
// only in process, and may publish nothing but the meta step-down.
func TestSystemUserOnlyInProcess(t *testing.T) {
	srv := start(t, natsd.Config{Name: "a1", ClientListen: "127.0.0.1:0", Password: password})
	user, pw := natsd.SystemUser(srv)
	if pw == "" || pw == password {
		t.Fatalf("system user password %q: want one of its own", pw)
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, pw), nats.NoReconnect())
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("system user on the client port: connect err %v, want an authorization violation", err)
	}
	if nc != nil {
		nc.Close()
	}

	violations := make(chan error, 4)
	sys, err := natsd.ConnectSystem(srv, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatalf("system user in process: %v", err)
	}
	defer sys.Close()
	if err := sys.Publish("$SYS.REQ.SERVER.PING", nil); err != nil {
		t.Fatal(err)
	}
	_ = sys.Flush()
	select {
	case err := <-violations:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("system user publishing a system request: %v, want a permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the system user published a system request other than the meta step-down unrefused")
	}
}
