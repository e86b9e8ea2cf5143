package natsd

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// A cluster member that stops leads its streams and consumers until it
// exits, and its peers notice it gone only after an election timeout
// (seconds): meanwhile every write to those streams goes unanswered (a
// publish waits for its caller's deadline, a lane writer for its ack
// bound, and its partition restarts). So a stopping agent hands each
// leadership to a caught-up peer at SIGTERM, while it is still routed to
// them (HandOverLeaderships): the group has its new leader within a
// round trip.
//
// A step-down drops the proposals the leader has queued, unanswered: a
// writer waiting for such an ack waits its whole bound. So the groups the
// stopping agent itself goes on writing through its drain (its own
// partitions' streams) are kept (HandOverLeaderships' keep) and move at
// its exit as before; handing the others over early, while the cell runs
// steadily, costs fewer dropped writes than at the end of the drain,
// when the new owners of its partitions write their catch-up.

// Handed is what HandOverLeaderships moved.
type Handed struct {
	Streams, Consumers int
	// Left is how many groups this server still led when it gave up
	// (no caught-up peer to take them, or no new leader in time).
	Left int
}

// handOverTry bounds one step-down request (and the wait bounds them all).
const handOverTry = 500 * time.Millisecond

// HandOverLeaderships asks every stream and consumer group this server
// leads, but those keep names (nil: none), to step down in favour of a
// replica that is current (caught up, online), each group once, and
// waits up to wait until none is led here;
// groups that elect this server while it waits (a consumer another agent
// just created) are handed over the same way. A group with no current
// replica is left as it is: stepping down would leave it without a
// leader until this server was elected again. Outside a cluster it
// returns at once.
func (s *Server) HandOverLeaderships(wait time.Duration, keep func(stream, consumer string) bool) Handed {
	var got Handed
	if !s.ns.JetStreamIsClustered() {
		return got
	}
	deadline := time.Now().Add(wait)
	asked := make(map[string]bool) // true: its transfer is under way
	for {
		led := s.ledHere(keep)
		got.Left = len(led)
		waiting := false
		for _, g := range led {
			moving, seen := asked[g.key()]
			switch {
			case seen:
				waiting = waiting || moving
			case g.preferred == "":
				// No caught-up replica: left to the election at the exit.
			case !time.Now().Before(deadline):
				// Out of time: left to the election at the exit.
			default:
				err := s.stepDown(g, min(handOverTry, time.Until(deadline)))
				asked[g.key()] = err == nil
				if err != nil {
					s.log.Warn("could not hand a leadership over", "stream", g.stream, "consumer", g.consumer, "to", g.preferred, "error", err)
					continue
				}
				waiting = true
				if g.consumer == "" {
					got.Streams++
				} else {
					got.Consumers++
				}
			}
		}
		if !waiting || !time.Now().Before(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ledGroup is a stream's or a consumer's Raft group led by this server,
// with the replica to hand it to ("": none is current).
type ledGroup struct {
	stream, consumer string
	preferred        string
}

func (g ledGroup) key() string { return g.stream + "\x00" + g.consumer }

// ledHere lists the replicated groups this server leads now, but those
// keep names.
func (s *Server) ledHere(keep func(stream, consumer string) bool) []ledGroup {
	kept := func(stream, consumer string) bool { return keep != nil && keep(stream, consumer) }
	jsz, err := s.ns.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true})
	if err != nil || jsz.Disabled {
		return nil
	}
	me := s.ns.Name()
	var led []ledGroup
	for _, acc := range jsz.AccountDetails {
		for _, st := range acc.Streams {
			if st.Cluster != nil && st.Cluster.Leader == me && len(st.Cluster.Replicas) > 0 && !kept(st.Name, "") {
				led = append(led, ledGroup{stream: st.Name, preferred: caughtUp(st.Cluster.Replicas)})
			}
			for _, c := range st.Consumer {
				if c.Cluster != nil && c.Cluster.Leader == me && len(c.Cluster.Replicas) > 0 && !kept(st.Name, c.Name) {
					led = append(led, ledGroup{stream: st.Name, consumer: c.Name, preferred: caughtUp(c.Cluster.Replicas)})
				}
			}
		}
	}
	return led
}

// caughtUp is one of a group's replicas that is online, current and has
// no lag ("": none).
func caughtUp(replicas []*server.PeerInfo) string {
	for _, peer := range replicas {
		if peer.Current && !peer.Offline && peer.Lag == 0 {
			return peer.Name
		}
	}
	return ""
}

// stepDown asks g's leader (this server) to hand it to g.preferred,
// through the JetStream API: nats-server's own step-down picks any peer
// heard from lately, which may be one still catching up, that then does
// not take the lead.
func (s *Server) stepDown(g ledGroup, timeout time.Duration) error {
	subject := "$JS.API.STREAM.LEADER.STEPDOWN." + g.stream
	if g.consumer != "" {
		subject = "$JS.API.CONSUMER.LEADER.STEPDOWN." + g.stream + "." + g.consumer
	}
	return requestStepDown(s.nc, subject, g.preferred, timeout)
}

// requestStepDown sends a step-down request naming preferred on nc
// and reads its answer.
func requestStepDown(nc *nats.Conn, subject, preferred string, timeout time.Duration) error {
	body, err := json.Marshal(map[string]any{"placement": map[string]string{"preferred": preferred}})
	if err != nil {
		return err
	}
	msg, err := nc.Request(subject, body, timeout)
	if err != nil {
		return err
	}
	var resp struct {
		Success bool `json:"success"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("step-down answer %q: %w", msg.Data, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("step-down refused: %s", resp.Error.Description)
	}
	return nil
}
