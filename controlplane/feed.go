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
		version, dests := cp.snapshot()
		tokens := cp.store.Tokens()
		partitions := cp.agents.partitionsFor(name, cp.cfg.Partitions)
		if resp, current := f.delta(version, dests, tokens, partitions); resp != nil {
			if err := send(resp); err != nil {
				return err
			}
			f.sent(current, tokens, partitions)
		}
		select {
		case <-changed:
		case <-ticker.C:
			if err := send(f.keepalive(version)); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// configFeed is what one Watch stream has sent its agent, from which the
// next response is the delta. Until the snapshot went out, dests is nil.
type configFeed struct {
	partitionCount uint32
	dests          map[string]*rivorav1.Destination // by id, as last sent
	tokens         []*rivorav1.ApiToken             // as last sent
	partitions     []uint32                         // as last sent
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
