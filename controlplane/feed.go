package controlplane

import (
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// keepalive bounds how long a Watch stream stays silent, so dead
// connections are noticed by both sides.
const keepalive = 10 * time.Second

// feed sends agent name its config until ctx ends or send fails: the
// snapshot first, then a delta whenever the destinations or the agent's
// partitions change, and a keepalive after keepalive of silence. The
// destinations keep their secrets (the agents sign with them; only the
// cell token opens Watch); the API tokens, as hashes, go whole on the
// snapshot and whenever they change.
func (cp *ControlPlane) feed(ctx context.Context, name string, send func(*rivorav1.WatchResponse) error) error {
	f := &configFeed{partitionCount: uint32(cp.cfg.Partitions)}
	ticker := time.NewTicker(keepalive)
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
// the snapshot, a change costs what it changed: only the destinations the
// store's journal names since the version last sent are rendered and
// compared — unless the limits file changed (every destination's
// effective limits may have) or the journal does not reach back that far.
func (cp *ControlPlane) nextConfig(f *configFeed, name string) (*rivorav1.WatchResponse, func()) {
	limits := cp.limits.Load()
	tokens := cp.store.Tokens()
	partitions := cp.agents.partitionsFor(name, cp.cfg.Partitions)
	if f.dests != nil && f.limits == limits {
		if version, changed, deleted, ok := cp.store.ChangedSince(f.version); ok {
			for i, d := range changed {
				changed[i] = cp.render(d)
			}
			f.compared = len(changed)
			resp := f.patch(version, changed, deleted, tokens, partitions)
			return resp, func() { f.sentPatch(version, limits, resp, tokens, partitions) }
		}
	}
	version, dests := cp.snapshot()
	f.compared = len(dests)
	resp, current := f.delta(version, dests, tokens, partitions)
	return resp, func() {
		if resp != nil {
			f.sent(current, tokens, partitions)
		}
		f.version, f.limits = version, limits
	}
}

// configFeed is what one Watch stream has sent its agent, from which the
// next response is the delta. Until the snapshot went out, dests is nil.
type configFeed struct {
	partitionCount uint32
	dests          map[string]*rivorav1.Destination // by id, as last sent
	tokens         []*rivorav1.ApiToken             // as last sent
	partitions     []uint32                         // as last sent
	// version is the config version dests are at, limits the limits
	// file they were rendered with.
	version uint64
	limits  *LimitsFile
	// compared counts the destinations the last response rendered and
	// compared (for tests: a change costs what it changed).
	compared int
}

// patch is delta for a change that touched only changed and deleted:
// every other destination is as last sent.
func (f *configFeed) patch(version uint64, changed []*rivorav1.Destination, deleted []string, tokens []*rivorav1.ApiToken, partitions []uint32) *rivorav1.WatchResponse {
	resp := &rivorav1.WatchResponse{Version: version, PartitionCount: f.partitionCount, Partitions: partitions}
	if !slices.EqualFunc(tokens, f.tokens, func(a, b *rivorav1.ApiToken) bool { return proto.Equal(a, b) }) {
		resp.Tokens, resp.TokensChanged = tokens, true
	}
	for _, d := range changed {
		if !proto.Equal(f.dests[d.GetId()], d) {
			resp.Destinations = append(resp.Destinations, d)
		}
	}
	for _, id := range deleted {
		if _, ok := f.dests[id]; ok {
			resp.RemovedDestinationIds = append(resp.RemovedDestinationIds, id)
		}
	}
	if len(resp.Destinations) == 0 && len(resp.RemovedDestinationIds) == 0 && !resp.TokensChanged && slices.Equal(partitions, f.partitions) {
		return nil
	}
	return resp
}

// sentPatch records that resp, from patch (nil: nothing to send), went
// out.
func (f *configFeed) sentPatch(version uint64, limits *LimitsFile, resp *rivorav1.WatchResponse, tokens []*rivorav1.ApiToken, partitions []uint32) {
	for _, d := range resp.GetDestinations() {
		f.dests[d.GetId()] = d
	}
	for _, id := range resp.GetRemovedDestinationIds() {
		delete(f.dests, id)
	}
	f.tokens, f.partitions, f.version, f.limits = tokens, partitions, version, limits
}

// delta is the response that brings the agent from what it was sent to
// this config (nil if nothing changed), and the config by id to pass to
// sent once the response went out.
func (f *configFeed) delta(version uint64, dests []*rivorav1.Destination, tokens []*rivorav1.ApiToken, partitions []uint32) (*rivorav1.WatchResponse, map[string]*rivorav1.Destination) {
	first := f.dests == nil
	resp := &rivorav1.WatchResponse{Version: version, Snapshot: first, PartitionCount: f.partitionCount, Partitions: partitions}
	if first || !slices.EqualFunc(tokens, f.tokens, func(a, b *rivorav1.ApiToken) bool { return proto.Equal(a, b) }) {
		resp.Tokens, resp.TokensChanged = tokens, true
	}
	current := make(map[string]*rivorav1.Destination, len(dests))
	for _, d := range dests {
		current[d.GetId()] = d
		if first || !proto.Equal(f.dests[d.GetId()], d) {
			resp.Destinations = append(resp.Destinations, d)
		}
	}
	for id := range f.dests {
		if _, ok := current[id]; !ok {
			resp.RemovedDestinationIds = append(resp.RemovedDestinationIds, id)
		}
	}
	if !first && len(resp.Destinations) == 0 && len(resp.RemovedDestinationIds) == 0 && !resp.TokensChanged && slices.Equal(partitions, f.partitions) {
		return nil, nil
	}
	return resp, current
}

// sent records that the response delta returned with current went out.
func (f *configFeed) sent(current map[string]*rivorav1.Destination, tokens []*rivorav1.ApiToken, partitions []uint32) {
	f.dests, f.tokens, f.partitions = current, tokens, partitions
}

// keepalive is an empty delta at the current version.
func (f *configFeed) keepalive(version uint64) *rivorav1.WatchResponse {
	return &rivorav1.WatchResponse{Version: version, PartitionCount: f.partitionCount, Partitions: f.partitions}
}
