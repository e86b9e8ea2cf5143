package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/encoding/protojson"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Consul KV keys of the control planes sharing one Consul.
const (
	// ConsulStateKey holds the state: one JSON value, the same format as
	// FileStore's controlplane.json.
	ConsulStateKey = "rivora/controlplane/state"
	// ConsulAuditPrefix holds the audit log, one protojson AuditEntry per
	// key, named by its 20-digit zero-padded sequence number.
	ConsulAuditPrefix = "rivora/controlplane/audit/"
)

// consulTimeout bounds a Consul request that is not a blocking query.
const consulTimeout = 10 * time.Second

var (
	// ErrConflict is returned by ConsulStore.Update when the state in
	// Consul changed since the store read it: another control plane wrote
	// it. The store has reloaded; the change may be retried.
	ErrConflict = errors.New("the control-plane state in Consul changed since this control plane read it (another control plane wrote it)")
	// ErrNotLeader is returned by ConsulStore.Update when the write was
	// fenced by a session that no longer holds the leader lock.
	ErrNotLeader = errors.New("this control plane no longer holds the leader lock; nothing was written")
)

// consulError is a failed Consul request; the API answers Unavailable.
type consulError struct {
	op  string
	err error
}

func (e *consulError) Error() string { return e.op + ": consul: " + e.err.Error() }
func (e *consulError) Unwrap() error { return e.err }

// ConsulStore keeps the state in Consul KV under ConsulStateKey. Writes are
// check-and-set on the ModifyIndex of the value the store last read, so a
// control plane that missed a newer state can never overwrite it; once
// fenced (by the leader election) a write also needs the leader lock to be
// held by this control plane's session.
type ConsulStore struct {
	kv  *api.KV
	txn *api.Txn

	mu    sync.Mutex
	state state
	index uint64 // ModifyIndex of the value read or written last; 0: no value
	// fenceKey and fenceSession make writes conditional on the lock.
	fenceKey, fenceSession string
}

var _ Store = (*ConsulStore)(nil)

// OpenConsulStore reads the state from Consul (none yet is an empty state
// at version 0).
func OpenConsulStore(ctx context.Context, client *api.Client) (*ConsulStore, error) {
	s := newConsulStore(client)
	if err := s.Reload(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// newConsulStore returns an empty store that has not read Consul yet; its
// first write fails with ErrConflict (and reloads) if a state exists.
func newConsulStore(client *api.Client) *ConsulStore {
	return &ConsulStore{kv: client.KV(), txn: client.Txn(), state: emptyState()}
}

// Reload reads the state from Consul, replacing what the store holds.
func (s *ConsulStore) Reload(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked(ctx)
}

func (s *ConsulStore) reloadLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	pair, _, err := s.kv.Get(ConsulStateKey, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return &consulError{"read state", err}
	}
	if pair == nil {
		s.state, s.index = emptyState(), 0
		return nil
	}
	st, err := decodeState(pair.Value)
	if err != nil {
		return fmt.Errorf("parse Consul key %s: %w", ConsulStateKey, err)
	}
	s.state, s.index = st, pair.ModifyIndex
	return nil
}

// fence makes every later write conditional on session holding key.
func (s *ConsulStore) fence(key, session string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fenceKey, s.fenceSession = key, session
}

// Snapshot returns the config version and every destination, sorted by id.
func (s *ConsulStore) Snapshot() (uint64, []*rivorav1.Destination) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.version, sortedDests(s.state.dests)
}

// Get returns a destination.
func (s *ConsulStore) Get(id string) (*rivorav1.Destination, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return getDest(s.state.dests, id)
}

// Tokens returns the API tokens, oldest first.
func (s *ConsulStore) Tokens() []*rivorav1.ApiToken {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedTokens(s.state.tokens)
}

// UpdateTokens is Update for the API tokens: the same fenced
// check-and-set write of the whole state.
func (s *ConsulStore) UpdateTokens(fn func(tokens map[string]*rivorav1.ApiToken) error) (uint64, error) {
	return s.update(func(st *state) error { return fn(st.tokens) })
}

// Update applies fn to a copy of the destinations and writes the result as
// the next config version, in one Consul transaction: check-and-set on the
// value's ModifyIndex (and, when fenced, a check that the leader lock is
// still ours). If another writer got there first, Update reloads the
// state and returns ErrConflict; if the lock is gone, ErrNotLeader.
func (s *ConsulStore) Update(fn func(dests map[string]*rivorav1.Destination) error) (uint64, error) {
	return s.update(func(st *state) error { return fn(st.dests) })
}

func (s *ConsulStore) update(fn func(st *state) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.state.clone()
	if err := fn(&next); err != nil {
		return 0, err
	}
	next.version++
	data, err := encodeState(next)
	if err != nil {
		return 0, err
	}
	var ops api.TxnOps
	fenced := s.fenceSession != ""
	if fenced {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: s.fenceKey, Session: s.fenceSession}})
	}
	ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: ConsulStateKey, Value: data, Index: s.index}})
	ctx, cancel := context.WithTimeout(context.Background(), consulTimeout)
	defer cancel()
	ok, resp, _, err := s.txn.Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		// The outcome is unknown; if it was written, the next write's
		// check-and-set fails and reloads.
		return 0, &consulError{"save state", err}
	}
	if !ok {
		for _, e := range resp.Errors {
			if fenced && e.OpIndex == 0 {
				return 0, ErrNotLeader
			}
		}
		if err := s.reloadLocked(ctx); err != nil {
			return 0, fmt.Errorf("%w; reloading it failed: %w", ErrConflict, err)
		}
		return 0, fmt.Errorf("%w; reloaded version %d, retry the change", ErrConflict, s.state.version)
	}
	var index uint64
	for _, r := range resp.Results {
		if r.KV != nil && r.KV.Key == ConsulStateKey {
			index = r.KV.ModifyIndex
		}
	}
	if index == 0 {
		return 0, fmt.Errorf("save state: Consul's answer has no index for %s", ConsulStateKey)
	}
	s.state, s.index = next, index
	return next.version, nil
}

// ConsulAuditLog keeps the audit log in Consul KV, one key per entry under
// ConsulAuditPrefix. Keys are created only if absent, so control planes
// appending at once never overwrite each other's entries.
type ConsulAuditLog struct {
	kv *api.KV

	mu   sync.Mutex
	next uint64 // sequence number to try next; 0: find the end first
}

var _ AuditLog = (*ConsulAuditLog)(nil)

// NewConsulAuditLog returns the audit log in client's Consul.
func NewConsulAuditLog(client *api.Client) *ConsulAuditLog {
	return &ConsulAuditLog{kv: client.KV()}
}

func auditKey(seq uint64) string { return fmt.Sprintf("%s%020d", ConsulAuditPrefix, seq) }

// auditSeq is the sequence number of an audit key (false: not one).
func auditSeq(key string) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimPrefix(key, ConsulAuditPrefix), 10, 64)
	return n, err == nil && strings.HasPrefix(key, ConsulAuditPrefix)
}

// maxAppendRaces bounds how often Append loses a sequence number to
// another control plane before giving up.
const maxAppendRaces = 10

// Append records one entry under the next free sequence number.
func (a *ConsulAuditLog) Append(e *rivorav1.AuditEntry) error {
	value, err := protojson.Marshal(e)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), consulTimeout)
	defer cancel()
	w := (&api.WriteOptions{}).WithContext(ctx)
	for range maxAppendRaces {
		if a.next == 0 {
			last, err := a.lastSeq(ctx)
			if err != nil {
				return err
			}
			a.next = last + 1
		}
		// ModifyIndex 0: create the key only if it does not exist.
		created, _, err := a.kv.CAS(&api.KVPair{Key: auditKey(a.next), Value: value}, w)
		if err != nil {
			return &consulError{"append audit entry", err}
		}
		if created {
			a.next++
			return nil
		}
		a.next = 0 // another control plane appended: find the end again
	}
	return fmt.Errorf("append audit entry: lost the race for a sequence number %d times", maxAppendRaces)
}

func (a *ConsulAuditLog) lastSeq(ctx context.Context) (uint64, error) {
	keys, _, err := a.kv.Keys(ConsulAuditPrefix, "", (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return 0, &consulError{"read audit log", err}
	}
	var last uint64
	for _, k := range keys {
		if n, ok := auditSeq(k); ok {
			last = max(last, n)
		}
	}
	return last, nil
}

// List returns the newest limit entries (all when limit <= 0), oldest
// first, optionally only those of one destination, like FileAuditLog.
func (a *ConsulAuditLog) List(limit int, destinationID string) ([]*rivorav1.AuditEntry, error) {
	ctx, cancel := context.WithTimeout(context.Background(), consulTimeout)
	defer cancel()
	pairs, _, err := a.kv.List(ConsulAuditPrefix, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, &consulError{"read audit log", err}
	}
	type seqPair struct {
		seq  uint64
		pair *api.KVPair
	}
	var entries []seqPair
	for _, p := range pairs {
		if n, ok := auditSeq(p.Key); ok {
			entries = append(entries, seqPair{n, p})
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].seq < entries[j].seq })
	var out []*rivorav1.AuditEntry
	for _, sp := range entries {
		e := &rivorav1.AuditEntry{}
		if err := protojson.Unmarshal(sp.pair.Value, e); err != nil {
			return nil, fmt.Errorf("audit log key %s: %w", sp.pair.Key, err)
		}
		if destinationID != "" && e.GetDestinationId() != destinationID {
			continue
		}
		out = append(out, e)
	}
	return newest(out, limit), nil
}
