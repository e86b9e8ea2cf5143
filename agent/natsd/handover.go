package natsd

import (
	"context"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A cluster member that stops keeps leading its streams and consumers
// until it exits, and nats-server then hands them over only as the
// others notice it gone: for an election timeout every write to those
// streams goes unanswered (a publish waits for its caller's deadline, a
// partition's lane writer for its ack bound, and restarts). A stopping
// agent hands its leaderships over first (HandOverLeaderships), while it
// is still connected to its peers: each one moves in a round trip, and
// the writes of its drain reach the new leaders through the routes.

// handOverEvery is how often the handover looks again for leaderships:
// a consumer created during the drain (another agent taking one of this
// agent's partitions resets its mover) may elect this server.
const handOverEvery = 200 * time.Millisecond

// Handed is what HandOverLeaderships moved.
type Handed struct {
	Streams, Consumers int
}

// HandOverLeaderships steps down every stream and consumer this server
// leads, now and then every handOverEvery until ctx ends, and returns
// how many it stepped down. The meta group's leadership is not moved:
// nats-server takes that only from the system account, which the agent
// does not use (a meta leader's exit delays stream and consumer
// creations by an election, not writes). Outside a cluster it returns at
// once: there is nobody to hand over to.
func (s *Server) HandOverLeaderships(ctx context.Context) Handed {
	var total Handed
	if !s.ns.JetStreamIsClustered() {
		return total
	}
	tick := time.NewTicker(handOverEvery)
	defer tick.Stop()
	for {
		got := s.handOverOnce()
		total.Streams += got.Streams
		total.Consumers += got.Consumers
		select {
		case <-ctx.Done():
			return total
		case <-tick.C:
		}
	}
}

// handOverOnce steps down what this server leads now.
func (s *Server) handOverOnce() Handed {
	var got Handed
	jsz, err := s.ns.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true})
	if err != nil {
		return got // JetStream is off: nothing is led here
	}
	me := s.ns.Name()
	for _, acc := range jsz.AccountDetails {
		for _, st := range acc.Streams {
			if ledHere(st.Cluster, me) {
				if s.ns.JetStreamStepdownStream(acc.Id, st.Name) == nil {
					got.Streams++
				}
			}
			for _, c := range st.Consumer {
				if ledHere(c.Cluster, me) {
					if s.ns.JetStreamStepdownConsumer(acc.Id, st.Name, c.Name) == nil {
						got.Consumers++
					}
				}
			}
		}
	}
	return got
}

// ledHere is whether a group is led by this server (me) and has a peer
// that is current to take the lead: with none (one replica, or the
// others gone) a step-down would leave the group without a leader until
// this server is elected again.
func ledHere(ci *server.ClusterInfo, me string) bool {
	if ci == nil || ci.Leader != me {
		return false
	}
	for _, peer := range ci.Replicas {
		if peer.Current && !peer.Offline {
			return true
		}
	}
	return false
}
