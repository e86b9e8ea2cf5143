package natsd

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Reach tells whether a write to a stream can be committed from this
// server now, judged from the server's own Raft state: no request
// crosses the network, so a server cut off from its peers knows it as
// soon as their heartbeats stop, instead of after a request's timeout.
// A stream's replicas hear from their leader (and the leader from them)
// every second; when that stops, no write sent from here can be
// acknowledged, so a caller may refuse at once (retry elsewhere) rather
// than wait for an answer that cannot come.
//
// It judges only streams with a replica on this server; for another one
// it asks the JetStream meta group the same question (a server cut off
// from its peers has lost its meta leader too), and otherwise says
// nothing against it. Outside a cluster every stream is reachable.
//
// The view is read at most every viewMaxAge and shared by every caller,
// so a burst of refusals costs one read of the server's state. The read
// (the server's JetStream state, under its own locks) runs without
// Reach's lock held: while one caller reads a new view, the others
// answer from the last one rather than queue behind the read, so a
// server slow to report its state delays one check, not every publish.
type Reach struct {
	ns *server.Server

	// read takes a view (readView; a test's own).
	read func() *reachView

	mu sync.Mutex
	// view is the last view read (nil: none yet); reading is closed when
	// the read under way ends (nil: none under way).
	view    *reachView
	reading chan struct{}
}

// newReach is the judge of ns's streams.
func newReach(ns *server.Server) *Reach {
	return &Reach{ns: ns, read: func() *reachView { return readView(ns) }}
}

// reachView is one read of the server's state.
type reachView struct {
	ns *server.Server
	at time.Time
	// streams is, per stream with a replica here, why a write cannot be
	// committed from here (nil: it can).
	streams map[string]error
	// meta is the meta group's, read once and only when asked for (a
	// stream without a replica here): the callers asking for it wait for
	// that one read.
	metaOnce sync.Once
	meta     error
}

// ErrUnreachable is the cause Reach.Check wraps: this server cannot
// reach a quorum of a stream's replicas now.
var ErrUnreachable = errors.New("no quorum of its replicas within reach")

// heardWithin is how recently a replica must have been heard to count
// towards a quorum: leaders and followers exchange heartbeats every
// second, so three seconds of silence is a cut, not a busy peer (NATS
// itself stops counting a replica as current only after ten).
const heardWithin = 3 * time.Second

// viewMaxAge bounds how old a view Check answers from may be, but for
// the one a read under way replaces.
const viewMaxAge = 200 * time.Millisecond

// firstReadWait bounds how long a caller waits for the first view,
// which another caller is reading; then nothing is held against a
// stream.
const firstReadWait = time.Second

// Reach is this server's judge of its streams' reach (one per server:
// its callers share its view).
func (s *Server) Reach() *Reach { return s.reach }

// Check returns nil when, as far as this server knows, a write to each
// of the named streams can be committed from here; otherwise an error
// wrapping ErrUnreachable that names the first stream that cannot and
// why. A nil Reach, or a server outside a cluster, never objects.
func (r *Reach) Check(streams ...string) error {
	if r == nil || !r.ns.JetStreamIsClustered() {
		return nil
	}
	v := r.current()
	if v == nil {
		return nil
	}
	for _, name := range streams {
		err, hosted := v.streams[name]
		if !hosted {
			err = v.metaQuorum()
		}
		if err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
	}
	return nil
}

// current returns a view at most viewMaxAge old, reading a new one when
// needed; while another caller reads one, the last view (nil when there
// is none yet and the first read took longer than firstReadWait).
func (r *Reach) current() *reachView {
	r.mu.Lock()
	v, reading := r.view, r.reading
	if v != nil && time.Since(v.at) <= viewMaxAge {
		r.mu.Unlock()
		return v
	}
	if reading != nil {
		r.mu.Unlock()
		if v != nil {
			return v
		}
		t := time.NewTimer(firstReadWait)
		defer t.Stop()
		select {
		case <-reading:
		case <-t.C:
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.view
	}
	done := make(chan struct{})
	r.reading = done
	r.mu.Unlock()
	var read *reachView
	defer func() {
		// Even when the read panicked: the next caller reads again.
		r.mu.Lock()
		if read != nil {
			r.view = read
		}
		r.reading = nil
		r.mu.Unlock()
		close(done)
	}()
	read = r.read()
	return read
}

// readView takes a view of the server's streams (the meta group's is
// read when first asked for).
func readView(ns *server.Server) *reachView {
	v := &reachView{ns: ns, at: time.Now(), streams: map[string]error{}}
	if acc, err := ns.JszAccount(&server.JSzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT, Streams: true}); err == nil {
		for _, st := range acc.Streams {
			v.streams[st.Name] = quorum(ns.Name(), st.Cluster)
		}
	}
	return v
}

// metaQuorum is the meta group's reach in this view.
func (v *reachView) metaQuorum() error {
	v.metaOnce.Do(func() {
		info, err := v.ns.Jsz(nil)
		if err != nil || info.Meta == nil {
			return
		}
		if err := quorum(v.ns.Name(), &server.ClusterInfo{Leader: info.Meta.Leader, Replicas: info.Meta.Replicas}); err != nil {
			v.meta = fmt.Errorf("JetStream meta group: %w", err)
		}
	})
	return v.meta
}

// quorum judges one Raft group as this server sees it: its leader, when
// this server leads, must have heard a quorum of the replicas within
// heardWithin; a follower must have heard its leader within heardWithin.
func quorum(self string, c *server.ClusterInfo) error {
	if c == nil || len(c.Replicas) == 0 {
		return nil // one replica: this server is the whole store
	}
	if c.Leader == "" {
		return fmt.Errorf("%w: no leader known here (an election is under way, or this agent is cut off from the other replicas)", ErrUnreachable)
	}
	if c.Leader == self {
		heard := 1 // the leader itself
		var silent []string
		for _, p := range c.Replicas {
			if recentlyHeard(p) {
				heard++
			} else {
				silent = append(silent, p.Name)
			}
		}
		if need := (len(c.Replicas)+1)/2 + 1; heard < need {
			return fmt.Errorf("%w: this agent leads it but heard only %d of the %d replicas it needs within %s (silent: %s)",
				ErrUnreachable, heard, need, heardWithin, strings.Join(silent, ", "))
		}
		return nil
	}
	for _, p := range c.Replicas {
		if p.Name == c.Leader {
			if recentlyHeard(p) {
				return nil
			}
			return fmt.Errorf("%w: no word from its leader %s for %s", ErrUnreachable, c.Leader, p.Active.Round(100*time.Millisecond))
		}
	}
	return fmt.Errorf("%w: its leader %s is not among the replicas known here", ErrUnreachable, c.Leader)
}

// recentlyHeard tells whether a replica was heard within heardWithin.
// Active is 0 for a replica never heard at all.
func recentlyHeard(p *server.PeerInfo) bool {
	return p != nil && p.Active > 0 && p.Active < heardWithin
}
