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
// so a burst of refusals costs one read of the server's state.
type Reach struct {
	ns *server.Server

	mu sync.Mutex
	at time.Time
	// streams is, per stream with a replica here, why a write cannot be
	// committed from here (nil: it can); meta is the meta group's.
	streams map[string]error
	meta    error
	// metaRead: meta is this view's (it is read only when asked for: a
	// stream without a replica here).
	metaRead bool
}

// ErrUnreachable is the cause Reach.Check wraps: this server cannot
// reach a quorum of a stream's replicas now.
var ErrUnreachable = errors.New("no quorum of its replicas within reach")

// heardWithin is how recently a replica must have been heard to count
// towards a quorum: leaders and followers exchange heartbeats every
// second, so three seconds of silence is a cut, not a busy peer (NATS
// itself stops counting a replica as current only after ten).
const heardWithin = 3 * time.Second

// viewMaxAge bounds how old a view Check answers from may be.
const viewMaxAge = 200 * time.Millisecond

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
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.at) > viewMaxAge {
		r.read()
	}
	for _, name := range streams {
		err, hosted := r.streams[name]
		if !hosted {
			err = r.metaQuorum()
		}
		if err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
	}
	return nil
}

// read takes a new view of the server's streams and meta group.
func (r *Reach) read() {
	r.at = time.Now()
	r.streams = map[string]error{}
	r.meta, r.metaRead = nil, false
	if acc, err := r.ns.JszAccount(&server.JSzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT, Streams: true}); err == nil {
		for _, st := range acc.Streams {
			r.streams[st.Name] = quorum(r.ns.Name(), st.Cluster)
		}
	}
}

// metaQuorum is the meta group's reach in this view.
func (r *Reach) metaQuorum() error {
	if r.metaRead {
		return r.meta
	}
	r.metaRead = true
	info, err := r.ns.Jsz(nil)
	if err != nil || info.Meta == nil {
		return nil
	}
	if err := quorum(r.ns.Name(), &server.ClusterInfo{Leader: info.Meta.Leader, Replicas: info.Meta.Replicas}); err != nil {
		r.meta = fmt.Errorf("JetStream meta group: %w", err)
	}
	return r.meta
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
