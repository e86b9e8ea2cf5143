package controlplane

import (
	"slices"
	"sync"
)

// ownVersions remembers, per API token, the config versions its own
// changes produced (the newest few), so that a customer token's config
// status can be told in terms of its own changes only. The config version
// counts every change in the cell: the agents' applied versions, shown to
// a customer token as they are, would let it watch other customers'
// configuration activity by polling `rivoractl agents list`. Told "the
// newest of your changes this agent has applied" instead, its --wait
// works as before (its change's version is among them) and polling learns
// nothing of anyone else's.
//
// It is this control plane's memory: after a restart or a failover a
// token's earlier changes are not in it (its --wait begun before then
// times out, the change made).
type ownVersions struct {
	mu      sync.Mutex
	byToken map[string][]uint64 // ascending
}

// ownVersionsKept bounds what is kept per token: a --wait waits for the
// change just made, never for one many changes back.
const ownVersionsKept = 32

func newOwnVersions() *ownVersions { return &ownVersions{byToken: map[string][]uint64{}} }

// add records that tokenID's change produced version ("" — Rivora's own,
// the limits file's — is not kept).
func (o *ownVersions) add(tokenID string, version uint64) {
	if tokenID == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	vs := o.byToken[tokenID]
	i, found := slices.BinarySearch(vs, version)
	if found {
		return
	}
	vs = slices.Insert(vs, i, version)
	if len(vs) > ownVersionsKept {
		vs = vs[len(vs)-ownVersionsKept:]
	}
	o.byToken[tokenID] = vs
}

// floor is the newest of tokenID's versions at or below v, 0 for none:
// an agent that applied v has applied that change of the token's, and
// every one before it.
func (o *ownVersions) floor(tokenID string, v uint64) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	vs := o.byToken[tokenID]
	i, found := slices.BinarySearch(vs, v)
	if found {
		return v
	}
	if i == 0 {
		return 0
	}
	return vs[i-1]
}
