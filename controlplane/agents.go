package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// agentRegistry tracks the agents following this control plane (one Watch
// stream each) and talks to them through their PartitionService.
type agentRegistry struct {
	http *http.Client

	mu     sync.Mutex
	agents map[string]*agentState
}

type agentState struct {
	name      string
	address   string
	streams   int // open Watch streams (a reconnect may overlap the old one)
	applied   uint64
	lastSeen  time.Time
	joined    time.Time
	client    rivorav1connect.PartitionServiceClient
	partition []uint32 // assigned
	owned     []uint32 // as the agent reported
}

func newAgentRegistry() *agentRegistry {
	return &agentRegistry{http: &http.Client{Timeout: 30 * time.Second}, agents: make(map[string]*agentState)}
}

func (r *agentRegistry) connect(name, address string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.agents[name]
	if a == nil || a.address != address {
		joined := now
		if a != nil && a.streams > 0 {
			joined = a.joined
		}
		a = &agentState{name: name, address: address, joined: joined, client: rivorav1connect.NewPartitionServiceClient(r.http, address)}
		r.agents[name] = a
	}
	if a.streams == 0 {
		a.joined = now
	}
	a.streams++
	a.lastSeen = now
}

func (r *agentRegistry) disconnect(name string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.agents[name]; a != nil {
		a.streams--
		a.lastSeen = now
	}
}

func (r *agentRegistry) applied(name string, version uint64, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.agents[name]
	if a == nil {
		return fmt.Errorf("agent %q is not watching this control plane", name)
	}
	a.applied = max(a.applied, version)
	a.lastSeen = now
	return nil
}

// partitionsFor assigns partitions: until ownership grants arrive (Consul),
// a cell has one owner: the longest-connected agent owns every partition.
func (r *agentRegistry) partitionsFor(name string, count int) []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var owner *agentState
	for _, a := range r.agents {
		if a.streams > 0 && (owner == nil || a.joined.Before(owner.joined) || (a.joined.Equal(owner.joined) && a.name < owner.name)) {
			owner = a
		}
	}
	if owner == nil || owner.name != name {
		if a := r.agents[name]; a != nil {
			a.partition = nil
		}
		return nil
	}
	out := make([]uint32, count)
	for i := range out {
		out[i] = uint32(i)
	}
	owner.partition = out
	return out
}

func (r *agentRegistry) status() []*rivorav1.AgentStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*rivorav1.AgentStatus, 0, len(r.agents))
	for _, a := range r.agents {
		out = append(out, &rivorav1.AgentStatus{
			Name: a.name, Address: a.address, Connected: a.streams > 0, AppliedVersion: a.applied,
			LastSeen: timestamppb.New(a.lastSeen), Partitions: a.partition,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// connected returns the clients of every connected agent.
func (r *agentRegistry) connected() []*agentState {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*agentState
	for _, a := range r.agents {
		if a.streams > 0 {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

var errNoAgents = errors.New("no agent is connected to this control plane; start one with `rivora agent --controlplane URL`")

// sum asks every connected agent for a count and adds the answers up; on
// an error it returns the total so far.
func (r *agentRegistry) sum(ask func(*agentState) (int64, error)) (int64, error) {
	agents := r.connected()
	if len(agents) == 0 {
		return 0, errNoAgents
	}
	var total int64
	for _, a := range agents {
		n, err := ask(a)
		if err != nil {
			return total, fmt.Errorf("agent %s: %w", a.name, err)
		}
		total += n
	}
	return total, nil
}

// pending sums a destination's pending events over the connected agents.
func (r *agentRegistry) pending(ctx context.Context, destinationID string) (int64, error) {
	return r.sum(func(a *agentState) (int64, error) {
		resp, err := a.client.CountPending(ctx, connect.NewRequest(&rivorav1.CountPendingRequest{DestinationId: destinationID}))
		if err != nil {
			return 0, err
		}
		return resp.Msg.GetPending(), nil
	})
}

// archivePending dead-letters a destination's pending events on every
// connected agent.
func (r *agentRegistry) archivePending(ctx context.Context, destinationID string) (int64, error) {
	return r.sum(func(a *agentState) (int64, error) {
		resp, err := a.client.ArchivePending(ctx, connect.NewRequest(&rivorav1.ArchivePendingRequest{DestinationId: destinationID}))
		if err != nil {
			return 0, err
		}
		return resp.Msg.GetArchived(), nil
	})
}

func (r *agentRegistry) health(ctx context.Context, destinationID string) ([]*rivorav1.DestinationHealth, error) {
	agents := r.connected()
	if len(agents) == 0 {
		return nil, errNoAgents
	}
	var out []*rivorav1.DestinationHealth
	for _, a := range agents {
		resp, err := a.client.GetHealth(ctx, connect.NewRequest(&rivorav1.GetHealthRequest{DestinationId: destinationID}))
		if err != nil {
			return nil, fmt.Errorf("agent %s: %w", a.name, err)
		}
		out = append(out, resp.Msg.GetDestinations()...)
	}
	return out, nil
}

// awaitApplied waits until every connected agent applied version, or up to
// grace.
func (r *agentRegistry) awaitApplied(version uint64, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for {
		behind := false
		r.mu.Lock()
		for _, a := range r.agents {
			if a.streams > 0 && a.applied < version {
				behind = true
				break
			}
		}
		r.mu.Unlock()
		if !behind || time.Now().After(deadline) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// owned records the partitions an agent holds the locks of.
func (r *agentRegistry) owned(name, session string, partitions []uint32, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.agents[name]
	if a == nil {
		return fmt.Errorf("agent %q is not watching this control plane", name)
	}
	a.owned = slices.Clone(partitions)
	slices.Sort(a.owned)
	a.lastSeen = now
	return nil
}
