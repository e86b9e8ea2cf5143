package controlplane

import (
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// keepalive bounds how long a Watch stream stays silent, so dead
// connections are noticed by both sides. An edge's watch has a shorter
// one, edgeKeepalive: an edge tells a token it does not know from one
// made while its link to the control plane is cut by how recently it
// heard from it (edge/edged heardFresh), so it must hear often.
const (
	keepalive     = 10 * time.Second
	edgeKeepalive = 2 * time.Second
)

// feed sends agent name its config until ctx ends or send fails: the
// snapshot first, then a delta whenever the destinations, subscriptions,
// catalogue, tokens, registered edges or the agent's partitions change,
// and a keepalive after keepalive of silence. The destinations and
// subscriptions keep their secrets and header values (the agents sign
// with them; only the cell token opens Watch); the API tokens, as hashes,
// the event-type catalogue and the edges' names go whole on the snapshot
// and whenever they change.
func (cp *ControlPlane) feed(ctx context.Context, name string, send func(*rivorav1.WatchResponse) error) error {
	return cp.follow(ctx, &configFeed{partitionCount: uint32(cp.cfg.Partitions), strict: cp.cfg.StrictEventTypes}, name, send)
}

// feedEdge is feed for edge name: the same config, never a partition
// (an edge is not in the agents' registry, so never in their rendezvous
// either). send redacts it (forEdge).
func (cp *ControlPlane) feedEdge(ctx context.Context, name string, send func(*rivorav1.WatchResponse) error) error {
	return cp.follow(ctx, &configFeed{partitionCount: uint32(cp.cfg.Partitions), strict: cp.cfg.StrictEventTypes, edge: true}, name, send)
}

// follow sends f's follower its config until ctx ends or send fails.
func (cp *ControlPlane) follow(ctx context.Context, f *configFeed, name string, send func(*rivorav1.WatchResponse) error) error {
	every := keepalive
	if f.edge {
		every = edgeKeepalive
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		changed := cp.changes()
		resp, sent := cp.nextConfig(f, name)
		if resp != nil {
			if err := send(resp); err != nil {
				return err
			}
		}
		sent()
		select {
		case <-changed:
		case <-ticker.C:
			if err := send(f.keepalive(f.version)); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// nextConfig is the response that brings f's agent to the current
// config (nil if it has it) and the func to call once it went out. After
// the snapshot, a change costs what it changed: only the destinations and
// subscriptions the store's journal names since the version last sent
// are rendered and compared — unless the limits file changed (every
// destination's effective limits may have) or the journal does not reach
// back that far.
func (cp *ControlPlane) nextConfig(f *configFeed, name string) (*rivorav1.WatchResponse, func()) {
	limits := cp.limits.Load()
	u := feedUpdate{tokens: cp.store.Tokens(), edges: edgeNames(cp.store.Edges())}
	if !f.edge {
		u.partitions = cp.agents.partitionsFor(name, cp.cfg.Partitions)
	}
	if f.dests != nil && f.limits == limits {
		if c, ok := cp.store.ChangedSince(f.version); ok {
			u.version, u.deletedDests, u.subs, u.deletedSubs = c.Version, c.DeletedDestinations, c.Subscriptions, c.DeletedSubscriptions
			for _, d := range c.Destinations {
				u.dests = append(u.dests, cp.render(d))
			}
			u.types = f.types
			if c.EventTypesChanged {
				u.types = cp.store.EventTypes()
			}
			f.compared = len(u.dests)
			resp := f.response(u)
			return resp, func() { f.sent(u, limits, resp) }
		}
	}
	c := cp.store.Contents()
	u.version, u.whole, u.subs, u.types = c.Version, true, c.Subscriptions, c.EventTypes
	for _, d := range c.Destinations {
		u.dests = append(u.dests, cp.render(d))
	}
	f.compared = len(u.dests)
	resp := f.response(u)
	return resp, func() { f.sent(u, limits, resp) }
}

// feedUpdate is the config an agent should have now: whole (every
// destination and subscription; any other one it was sent is gone) or
// in part (those changed, and the ids of those deleted, since the version
// last sent). The catalogue, tokens, edges and partitions are always
// whole.
type feedUpdate struct {
	version      uint64
	whole        bool
	dests        []*rivorav1.Destination
	deletedDests []string
	subs         []*rivorav1.Subscription
	deletedSubs  []string
	types        []*rivorav1.EventType
	tokens       []*rivorav1.ApiToken
	edges        []string
	partitions   []uint32
}

// configFeed is what one Watch stream has sent its agent, from which the
// next response is the delta. Until the snapshot went out, dests is nil.
type configFeed struct {
	partitionCount uint32
	// edge: the follower is an edge, which owns no partition.
	edge bool
	// strict is --strict-event-types, sent with the catalogue.
	strict     bool
	dests      map[string]*rivorav1.Destination  // by id, as last sent
	subs       map[string]*rivorav1.Subscription // by id, as last sent
	types      []*rivorav1.EventType             // as last sent
	tokens     []*rivorav1.ApiToken              // as last sent
	edges      []string                          // as last sent
	partitions []uint32                          // as last sent
	// version is the config version dests are at, limits the limits
	// file they were rendered with.
	version uint64
	limits  *LimitsFile
	// compared counts the destinations the last response rendered and
	// compared (for tests: a change costs what it changed).
	compared int
}

// response is the response that brings the agent from what it was sent
// to u (nil if nothing changed).
func (f *configFeed) response(u feedUpdate) *rivorav1.WatchResponse {
	first := f.dests == nil
	resp := &rivorav1.WatchResponse{Version: u.version, Snapshot: first, PartitionCount: f.partitionCount, Partitions: u.partitions, StrictEventTypes: f.strict}
	if first || !slices.EqualFunc(u.tokens, f.tokens, equalMessages) {
		resp.Tokens, resp.TokensChanged = u.tokens, true
	}
	if first || !slices.EqualFunc(u.types, f.types, equalMessages) {
		resp.EventTypes, resp.EventTypesChanged = u.types, true
	}
	if first || !slices.Equal(u.edges, f.edges) {
		resp.Edges, resp.EdgesChanged = u.edges, true
	}
	resp.Destinations, resp.RemovedDestinationIds = diffRecords(first, u.whole, f.dests, u.dests, u.deletedDests)
	resp.Subscriptions, resp.RemovedSubscriptionIds = diffRecords(first, u.whole, f.subs, u.subs, u.deletedSubs)
	if !first && len(resp.Destinations) == 0 && len(resp.RemovedDestinationIds) == 0 && len(resp.Subscriptions) == 0 &&
		len(resp.RemovedSubscriptionIds) == 0 && !resp.TokensChanged && !resp.EventTypesChanged && !resp.EdgesChanged &&
		slices.Equal(u.partitions, f.partitions) {
		return nil
	}
	return resp
}

func equalMessages[M proto.Message](a, b M) bool { return proto.Equal(a, b) }

// identified is a record with an id (a destination, a subscription).
type identified interface {
	proto.Message
	GetId() string
}

// diffRecords lists the records of now that differ from those sent (all
// of them on the first response) and the ids of the sent ones that are
// gone: with whole, those not in now; else those in deleted.
func diffRecords[M identified](first, whole bool, sent map[string]M, now []M, deleted []string) (changed []M, removed []string) {
	for _, m := range now {
		if old, ok := sent[m.GetId()]; first || !ok || !proto.Equal(old, m) {
			changed = append(changed, m)
		}
	}
	if whole {
		current := make(map[string]bool, len(now))
		for _, m := range now {
			current[m.GetId()] = true
		}
		for _, id := range sortedKeys(sent) {
			if !current[id] {
				removed = append(removed, id)
			}
		}
		return changed, removed
	}
	for _, id := range deleted {
		if _, ok := sent[id]; ok {
			removed = append(removed, id)
		}
	}
	return changed, removed
}

// sent records that resp, the response to u (nil: nothing to send), went
// out, with the limits file u was rendered with.
func (f *configFeed) sent(u feedUpdate, limits *LimitsFile, resp *rivorav1.WatchResponse) {
	f.version, f.limits = u.version, limits
	if resp == nil {
		return
	}
	if resp.GetSnapshot() {
		f.dests, f.subs = make(map[string]*rivorav1.Destination, len(u.dests)), make(map[string]*rivorav1.Subscription, len(u.subs))
	}
	for _, d := range resp.GetDestinations() {
		f.dests[d.GetId()] = d
	}
	for _, id := range resp.GetRemovedDestinationIds() {
		delete(f.dests, id)
	}
	for _, s := range resp.GetSubscriptions() {
		f.subs[s.GetId()] = s
	}
	for _, id := range resp.GetRemovedSubscriptionIds() {
		delete(f.subs, id)
	}
	if resp.GetEventTypesChanged() {
		f.types = resp.GetEventTypes()
	}
	f.tokens, f.edges, f.partitions = u.tokens, u.edges, u.partitions
}

// keepalive is an empty delta at the current version.
func (f *configFeed) keepalive(version uint64) *rivorav1.WatchResponse {
	return &rivorav1.WatchResponse{Version: version, PartitionCount: f.partitionCount, Partitions: f.partitions}
}
