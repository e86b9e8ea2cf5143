package natsd

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// quorum judges a Raft group from one server's view: a leader needs a
// quorum of replicas heard within heardWithin, a follower its leader
// heard within it; a group without a leader, or of one replica, is judged
// at once.
func TestQuorumFromTheLocalView(t *testing.T) {
	heard := func(name string, ago time.Duration) *server.PeerInfo {
		return &server.PeerInfo{Name: name, Active: ago, Current: true}
	}
	never := &server.PeerInfo{Name: "a3"} // Active 0: never heard
	for _, tc := range []struct {
		name string
		c    *server.ClusterInfo
		ok   bool
	}{
		{"one replica", &server.ClusterInfo{Leader: "a1"}, true},
		{"no cluster info", nil, true},
		{"no leader", &server.ClusterInfo{Replicas: []*server.PeerInfo{heard("a2", time.Second), heard("a3", time.Second)}}, false},
		{"leader hearing both", &server.ClusterInfo{Leader: "a1", Replicas: []*server.PeerInfo{heard("a2", time.Second), heard("a3", 2*time.Second)}}, true},
		{"leader hearing one of two", &server.ClusterInfo{Leader: "a1", Replicas: []*server.PeerInfo{heard("a2", time.Second), heard("a3", 20*time.Second)}}, true},
		{"leader hearing none", &server.ClusterInfo{Leader: "a1", Replicas: []*server.PeerInfo{heard("a2", 4*time.Second), never}}, false},
		{"leader of five hearing one", &server.ClusterInfo{Leader: "a1", Replicas: []*server.PeerInfo{heard("a2", time.Second), heard("a3", 5*time.Second), heard("a4", 5*time.Second), heard("a5", 5*time.Second)}}, false},
		{"follower hearing its leader", &server.ClusterInfo{Leader: "a2", Replicas: []*server.PeerInfo{heard("a2", 900*time.Millisecond), never}}, true},
		{"follower not hearing its leader", &server.ClusterInfo{Leader: "a2", Replicas: []*server.PeerInfo{heard("a2", 3500*time.Millisecond), heard("a3", time.Second)}}, false},
		{"leader unknown here", &server.ClusterInfo{Leader: "a9", Replicas: []*server.PeerInfo{heard("a2", time.Second)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := quorum("a1", tc.c)
			if tc.ok && err != nil {
				t.Fatalf("judged out of reach: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrUnreachable) {
				t.Fatalf("judged %v, want ErrUnreachable", err)
			}
		})
	}
}

// While one caller reads a new view, the others answer from the last one
// at once instead of waiting for the read; the first view is waited for.
func TestAViewBeingReadHoldsNoCallerBack(t *testing.T) {
	release := make(chan struct{})
	reads := make(chan int, 10)
	n := 0
	r := &Reach{read: func() *reachView {
		n++
		reads <- n
		at := time.Now()
		if n == 2 {
			<-release              // the second read hangs until released
			at = at.Add(time.Hour) // and stays fresh for the rest of the test
		}
		return &reachView{at: at, streams: map[string]error{"S": fmt.Errorf("read %d", n)}}
	}}
	if v := r.current(); v == nil || v.streams["S"].Error() != "read 1" {
		t.Fatalf("first view: %+v", v)
	}
	<-reads
	r.mu.Lock()
	r.view.at = time.Now().Add(-time.Second) // stale: the next caller reads
	r.mu.Unlock()
	slow := make(chan *reachView)
	go func() { slow <- r.current() }()
	if got := <-reads; got != 2 {
		t.Fatalf("read %d, want the second", got)
	}
	// The second read hangs; another caller gets the first view at once.
	if v := r.current(); v == nil || v.streams["S"].Error() != "read 1" {
		t.Fatalf("a caller during the read got %+v, want the last view", v)
	}
	close(release)
	if v := <-slow; v.streams["S"].Error() != "read 2" {
		t.Fatalf("the reader got %+v, want its own view", v)
	}
	if v := r.current(); v.streams["S"].Error() != "read 2" {
		t.Fatalf("after the read: %+v, want the new view", v)
	}
	if len(reads) != 0 {
		t.Fatalf("%d more reads; the new view was fresh", len(reads))
	}
}

// A read that panics leaves no read under way: the next caller reads.
func TestAReadThatPanickedIsReadAgain(t *testing.T) {
	reads := 0
	r := &Reach{read: func() *reachView {
		reads++
		if reads == 1 {
			panic("the server's state could not be read")
		}
		return &reachView{at: time.Now(), streams: map[string]error{}}
	}}
	func() {
		defer func() { _ = recover() }()
		r.current()
	}()
	if v := r.current(); v == nil || reads != 2 {
		t.Fatalf("after a read panicked: view %v, %d reads; want a view from a second read", v, reads)
	}
}
