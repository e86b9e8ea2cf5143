package controlplane

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/hashicorp/consul/api"

	"github.com/rivora/rivora/e2e/consultest"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A fenced store writes only while its session holds the leader lock, so a
// leader that was deposed but has not noticed yet writes nothing.
func TestConsulStoreFence(t *testing.T) {
	srv := consultest.Start(t)
	client, err := newConsulClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	session, _, err := client.Session().CreateNoChecks(&api.SessionEntry{TTL: "10s", Behavior: api.SessionBehaviorRelease}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenConsulStore(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	s.fence(ConsulLeaderKey, session)
	add := func(id string) error {
		_, err := s.Update(func(tx *DestinationTx) error {
			tx.Put(&rivorav1.Destination{Id: id})
			return nil
		})
		return err
	}
	if err := add("before"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("write before holding the lock: %v, want ErrNotLeader", err)
	}
	if ok, _, err := client.KV().Acquire(&api.KVPair{Key: ConsulLeaderKey, Session: session}, nil); !ok || err != nil {
		t.Fatalf("acquire: %v, %v", ok, err)
	}
	if err := add("while"); err != nil {
		t.Fatalf("write while holding the lock: %v", err)
	}
	if _, err := client.Session().Destroy(session, nil); err != nil {
		t.Fatal(err)
	}
	if err := add("after"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("write after the session ended: %v, want ErrNotLeader", err)
	}
	if v, ds := s.Snapshot(); v != 1 || len(ds) != 1 || ds[0].GetId() != "while" {
		t.Fatalf("state: version %d, %v", v, ds)
	}
	// At the API edge: a deposed leader is Unavailable, a lost race
	// Aborted (retry).
	if code := connect.CodeOf(asConnect(ErrNotLeader)); code != connect.CodeUnavailable {
		t.Fatalf("ErrNotLeader answers %v", code)
	}
	if code := connect.CodeOf(asConnect(fmt.Errorf("x: %w", ErrConflict))); code != connect.CodeAborted {
		t.Fatalf("ErrConflict answers %v", code)
	}
}
