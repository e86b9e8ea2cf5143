package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Consul KV keys of the control planes sharing one Consul.
const (
	// ConsulStatePrefix holds the state, one key per destination plus a
	// meta key; see ConsulStore for the layout.
	ConsulStatePrefix = "rivora/controlplane/state/"
	// ConsulStateMetaKey holds the global part of the state: the config
	// version, the API tokens and the registered edges. Every write
	// checks-and-sets it.
	ConsulStateMetaKey = ConsulStatePrefix + "meta"
	// ConsulDestinationsPrefix holds one protojson Destination per key,
	// named by its path-escaped id.
	ConsulDestinationsPrefix = ConsulStatePrefix + "destinations/"
	// ConsulSubscriptionsPrefix holds one protojson Subscription per key,
	// named by its path-escaped id; ConsulEventTypesPrefix one protojson
	// EventType per key, named by its path-escaped name.
	ConsulSubscriptionsPrefix = ConsulStatePrefix + "subscriptions/"
	ConsulEventTypesPrefix    = ConsulStatePrefix + "event-types/"
	// consulPendingPrefix holds the changes too large for one
	// transaction, staged under pending/<version>/<id> for a destination
	// and pending/<version>/<kind>/<id> for a subscription or event type
	// (see ConsulStore).
	consulPendingPrefix = ConsulStatePrefix + "pending/"
	// ConsulLegacyStateKey held the whole state as one JSON value (the
	// format of FileStore's controlplane.json) before the state got a key
	// per destination. A store that finds it and no meta key loads it,
	// and migrates it on its first write (at once when it leads). The
	// migration leaves ConsulLegacyTombstone there, not nothing: a control
	// plane of the older layout still running in the cell would read an
	// absent key as an empty state and, once it led, serve and write one;
	// the tombstone does not parse, so it refuses to load instead.
	ConsulLegacyStateKey = "rivora/controlplane/state"
	// ConsulLegacyTombstone is what the migration leaves at
	// ConsulLegacyStateKey.
	ConsulLegacyTombstone = "MOVED: this control plane state now lives under rivora/controlplane/state/ (one key per destination); upgrade every control plane of the cell"
	// ConsulAuditPrefix holds the audit log, one protojson AuditEntry per
	// key, named by its 20-digit zero-padded sequence number.
	ConsulAuditPrefix = "rivora/controlplane/audit/"
)

// Consul's limits on one transaction (Consul 1.14 defaults): 64
// operations, and a request body of txn_max_req_len = 512 KiB in which
// values travel base64-encoded. A transaction carries at most
// consulTxnMaxBytes of keys and values so that it always fits.
const (
	consulTxnMaxOps     = 64
	consulTxnMaxBytes   = 256 << 10
	consulMaxValueBytes = consulTxnMaxBytes - 4<<10
)

// consulTimeout bounds a Consul request that is not a blocking query.
const consulTimeout = 10 * time.Second

var (
	// ErrConflict is returned by ConsulStore.Update when the state in
	// Consul changed since the store read it: another control plane wrote
	// it. The store has reloaded; the change may be retried.
	ErrConflict = errkind.New("the control-plane state in Consul changed since this control plane read it (another control plane wrote it)", connect.CodeAborted)
	// ErrNotLeader is returned by ConsulStore.Update when the write was
	// fenced by a session that no longer holds the leader lock.
	ErrNotLeader = errkind.New("this control plane no longer holds the leader lock; nothing was written", connect.CodeUnavailable)
)

// consulError is a failed Consul request; the API answers Unavailable.
type consulError struct {
	op  string
	err error
}

func (e *consulError) Error() string { return e.op + ": consul: " + e.err.Error() }
func (e *consulError) Unwrap() error { return e.err }

// consulMeta is the value of ConsulStateMetaKey. Its version, tokens and
// edges read as a storeFile (decodeState) too.
type consulMeta struct {
	Version uint64            `json:"version"`
	Tokens  []json.RawMessage `json:"tokens,omitempty"`
	Edges   []json.RawMessage `json:"edges,omitempty"`
	// Pending, when not 0, is the version whose change is staged under
	// pending/<Pending>/ and not yet all moved into destinations/.
	Pending uint64 `json:"pending,omitempty"`
}

// ConsulStore keeps the state in Consul KV under ConsulStatePrefix: the
// meta key (version, tokens, edges) and one key per destination, subscription
// and event type, so a change writes only the records it changes. Every write is one
// transaction that checks-and-sets the meta key on the ModifyIndex the
// store last read, so a control plane that missed a newer state can never
// overwrite it; once fenced (by the leader election) it also checks that
// the leader lock is held by this control plane's session.
//
// A change too large for one transaction (consulTxnMaxOps,
// consulTxnMaxBytes) is written so that a crash at any point leaves a
// whole state, the old or the new one:
//  1. stage: the changed records (an empty value for a deleted one)
//     go under pending/<version>/[<kind>/]<id>, in as many transactions as needed,
//     each checking the fence and that the meta key is unchanged. Readers
//     ignore pending/ trees the meta key does not name.
//  2. commit: one transaction sets the meta key to the new version with
//     pending = version; from then on a reader overlays
//     pending/<version>/ on the records, which is the new state.
//  3. apply: the staged records are written to their keys (in
//     batches, each checking the fence and the meta key), then the meta
//     key drops pending and pending/ is deleted, in one transaction.
//
// The change is answered after step 2; a store that finds a pending
// change (a leader that crashed during step 3) finishes it before its
// next write. Staged trees of a change never committed are deleted by the
// next write.
type ConsulStore struct {
	kv  *api.KV
	txn *api.Txn

	mu    sync.Mutex
	state state
	index uint64 // ModifyIndex of the meta key read or written last; 0: none
	// legacy is the ModifyIndex of ConsulLegacyStateKey when the state was
	// loaded from it and not migrated yet.
	legacy uint64
	// pending is the version staged and committed but not applied yet,
	// pendingRefs its records; garbage: pending/ holds trees of no
	// committed change.
	pending     uint64
	pendingRefs []recordRef
	garbage     bool
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
// A fenced store (the leader) that finds the legacy single-value state
// migrates it now; one that finds a change half applied finishes it.
func (s *ConsulStore) Reload(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reloadLocked(ctx); err != nil {
		return err
	}
	if s.fenceSession == "" {
		return nil
	}
	if s.legacy != 0 {
		if err := s.writeLocked(ctx, s.everyDestinationLocked(delta{version: s.state.version})); err != nil {
			return fmt.Errorf("migrate %s to %s: %w", ConsulLegacyStateKey, ConsulStatePrefix, err)
		}
	}
	return s.finishPendingLocked(ctx)
}

func (s *ConsulStore) reloadLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	q := (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx)
	pairs, _, err := s.kv.List(ConsulStatePrefix, q)
	if err != nil {
		return &consulError{"read state", err}
	}
	var meta *api.KVPair
	records := map[recordRef]*api.KVPair{}
	staged := map[uint64]map[recordRef]*api.KVPair{}
	for _, p := range pairs {
		if p.Key == ConsulStateMetaKey {
			meta = p
			continue
		}
		if strings.HasPrefix(p.Key, consulPendingPrefix) {
			v, rest, _ := strings.Cut(strings.TrimPrefix(p.Key, consulPendingPrefix), "/")
			n, err1 := strconv.ParseUint(v, 10, 64)
			ref, err2 := parseStagedRef(rest)
			if err1 != nil || err2 != nil {
				continue // not ours to read; deleted with the other garbage
			}
			if staged[n] == nil {
				staged[n] = map[recordRef]*api.KVPair{}
			}
			staged[n][ref] = p
			continue
		}
		ref, ok, err := parseRecordKey(p.Key)
		if err != nil {
			return err
		}
		if ok {
			records[ref] = p
		}
	}
	s.pending, s.pendingRefs, s.garbage = 0, nil, len(staged) > 0
	if meta == nil {
		return s.loadLegacyLocked(q)
	}
	var m consulMeta
	if err := json.Unmarshal(meta.Value, &m); err != nil {
		return fmt.Errorf("parse Consul key %s: %w", ConsulStateMetaKey, err)
	}
	st, err := decodeState(meta.Value) // the version, the tokens and the edges
	if err != nil {
		return fmt.Errorf("parse Consul key %s: %w", ConsulStateMetaKey, err)
	}
	for ref, p := range records {
		if len(p.Value) == 0 {
			return fmt.Errorf("parse Consul key %s: empty", p.Key)
		}
		if err := st.putRaw(ref, p.Key, p.Value); err != nil {
			return err
		}
	}
	if m.Pending != 0 {
		if m.Pending != m.Version {
			return fmt.Errorf("parse Consul key %s: pending change %d is not the version %d", ConsulStateMetaKey, m.Pending, m.Version)
		}
		for _, ref := range sortedRefs(staged[m.Pending]) {
			if err := st.putRaw(ref, staged[m.Pending][ref].Key, staged[m.Pending][ref].Value); err != nil {
				return err
			}
			s.pendingRefs = append(s.pendingRefs, ref)
		}
		s.pending = m.Pending
		s.garbage = len(staged) > 1
	}
	st.countSubscriptions() // putRaw filled subs directly
	s.state, s.index, s.legacy = st, meta.ModifyIndex, 0
	return nil
}

// recordKind is one kind of record the layout keeps a key each of.
type recordKind int

const (
	kindDestination recordKind = iota
	kindSubscription
	kindEventType
)

// recordKinds: each kind's key prefix, and the token that names it in a
// staged key (none for destinations, staged as pending/<version>/<id>
// since before there were other kinds).
var recordKinds = []struct {
	prefix, staged, name string
}{
	kindDestination:  {ConsulDestinationsPrefix, "", "destination"},
	kindSubscription: {ConsulSubscriptionsPrefix, "subscriptions", "subscription"},
	kindEventType:    {ConsulEventTypesPrefix, "event-types", "event type"},
}

// recordRef names one record of the state.
type recordRef struct {
	kind recordKind
	id   string
}

// key is the record's Consul key.
func (r recordRef) key() string { return recordKinds[r.kind].prefix + url.PathEscape(r.id) }

// stagedKey is where a change of version stages the record.
func (r recordRef) stagedKey(version uint64) string {
	k := consulPendingPrefix + strconv.FormatUint(version, 10) + "/"
	if t := recordKinds[r.kind].staged; t != "" {
		k += t + "/"
	}
	return k + url.PathEscape(r.id)
}

// parseRecordKey reads a record's key (ok false: not a record's).
func parseRecordKey(key string) (recordRef, bool, error) {
	for kind, k := range recordKinds {
		if esc, ok := strings.CutPrefix(key, k.prefix); ok {
			id, err := url.PathUnescape(esc)
			if err != nil {
				return recordRef{}, false, fmt.Errorf("parse Consul key %s: not a path-escaped id: %w", key, err)
			}
			return recordRef{recordKind(kind), id}, true, nil
		}
	}
	return recordRef{}, false, nil
}

// parseStagedRef reads what follows pending/<version>/ in a staged key.
func parseStagedRef(rest string) (recordRef, error) {
	kind := kindDestination
	if t, esc, ok := strings.Cut(rest, "/"); ok {
		kind = -1
		for k, rk := range recordKinds {
			if rk.staged != "" && rk.staged == t {
				kind = recordKind(k)
			}
		}
		if kind < 0 {
			return recordRef{}, fmt.Errorf("staged key of unknown kind %q", t)
		}
		rest = esc
	}
	id, err := url.PathUnescape(rest)
	return recordRef{kind, id}, err
}

// sortedRefs lists refs' keys sorted by kind, then id.
func sortedRefs[V any](refs map[recordRef]V) []recordRef {
	out := make([]recordRef, 0, len(refs))
	for r := range refs {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b recordRef) int {
		if a.kind != b.kind {
			return int(a.kind) - int(b.kind)
		}
		return strings.Compare(a.id, b.id)
	})
	return out
}

// putRaw decodes the value of key into the record ref names (an empty
// value deletes it: a staged deletion).
func (st *state) putRaw(ref recordRef, key string, value []byte) error {
	switch ref.kind {
	case kindSubscription:
		return putDecoded(st.subs, ref.id, key, value, (*rivorav1.Subscription).GetId)
	case kindEventType:
		return putDecoded(st.types, ref.id, key, value, (*rivorav1.EventType).GetName)
	}
	return putDecoded(st.dests, ref.id, key, value, (*rivorav1.Destination).GetId)
}

// putDecoded decodes value into records under id, checking it holds that
// record; an empty value deletes it.
func putDecoded[M proto.Message](records map[string]M, id, key string, value []byte, idOf func(M) string) error {
	if len(value) == 0 {
		delete(records, id)
		return nil
	}
	m := newRecord[M]()
	if err := protojson.Unmarshal(value, m); err != nil {
		return fmt.Errorf("parse Consul key %s: %w", key, err)
	}
	if idOf(m) != id {
		return fmt.Errorf("parse Consul key %s: it holds %q", key, idOf(m))
	}
	records[id] = m
	return nil
}

// rawOf is the protojson of the record ref names (nil: it does not
// exist).
func (st *state) rawOf(ref recordRef) ([]byte, error) {
	var m proto.Message
	var ok bool
	switch ref.kind {
	case kindSubscription:
		m, ok = st.subs[ref.id]
	case kindEventType:
		m, ok = st.types[ref.id]
	default:
		m, ok = st.dests[ref.id]
	}
	if !ok {
		return nil, nil
	}
	return protojson.Marshal(m)
}

// recordChanges is the records d puts (their protojson) and deletes
// (nil), by ref.
func (d delta) recordChanges() (map[recordRef][]byte, error) {
	out := map[recordRef][]byte{}
	if err := addRecordChanges(out, kindDestination, d.dests); err != nil {
		return nil, err
	}
	if err := addRecordChanges(out, kindSubscription, d.subs); err != nil {
		return nil, err
	}
	if err := addRecordChanges(out, kindEventType, d.types); err != nil {
		return nil, err
	}
	return out, nil
}

func addRecordChanges[M proto.Message](out map[recordRef][]byte, kind recordKind, changes map[string]M) error {
	for id, m := range changes {
		ref := recordRef{kind, id}
		if deleted(m) {
			out[ref] = nil
			continue
		}
		raw, err := protojson.Marshal(m)
		if err != nil {
			return err
		}
		if len(raw) > consulMaxValueBytes {
			return fmt.Errorf("save state: %s %q is %d bytes, over the %d a Consul transaction carries", recordKinds[kind].name, id, len(raw), consulMaxValueBytes)
		}
		out[ref] = raw
	}
	return nil
}

// loadLegacyLocked loads the single-value state of older versions, if
// any: the state until it is migrated.
func (s *ConsulStore) loadLegacyLocked(q *api.QueryOptions) error {
	pair, _, err := s.kv.Get(ConsulLegacyStateKey, q)
	if err != nil {
		return &consulError{"read state", err}
	}
	if pair == nil {
		s.state, s.index, s.legacy = emptyState(), 0, 0
		return nil
	}
	if string(pair.Value) == ConsulLegacyTombstone {
		return fmt.Errorf("the Consul key %s says the state was migrated to %s, but %s is missing: restore it from a backup (Consul snapshot)", ConsulLegacyStateKey, ConsulStatePrefix, ConsulStateMetaKey)
	}
	st, err := decodeState(pair.Value)
	if err != nil {
		return fmt.Errorf("parse Consul key %s: %w", ConsulLegacyStateKey, err)
	}
	s.state, s.index, s.legacy = st, 0, pair.ModifyIndex
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

// Contents returns everything the agents' feed sends, at one version.
func (s *ConsulStore) Contents() Contents {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.contents()
}

// Get returns a destination.
func (s *ConsulStore) Get(id string) (*rivorav1.Destination, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return getDest(s.state.dests, id)
}

// GetSubscription returns a subscription.
func (s *ConsulStore) GetSubscription(id string) (*rivorav1.Subscription, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return getCopy(s.state.subs, id)
}

// Subscriptions returns the subscriptions keep accepts, sorted by id.
func (s *ConsulStore) Subscriptions(keep func(*rivorav1.Subscription) bool) []*rivorav1.Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedCopies(s.state.subs, keep)
}

// GetEventType returns an event type of the catalogue.
func (s *ConsulStore) GetEventType(name string) (*rivorav1.EventType, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return getCopy(s.state.types, name)
}

// EventTypes returns the catalogue, sorted by name.
func (s *ConsulStore) EventTypes() []*rivorav1.EventType {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedCopies(s.state.types, nil)
}

// ChangedSince returns what changed after version since (see Store).
func (s *ConsulStore) ChangedSince(since uint64) (Changes, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.changes(since)
}

// Tokens returns the API tokens, oldest first.
func (s *ConsulStore) Tokens() []*rivorav1.ApiToken {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedTokens(s.state.tokens)
}

// UpdateTokens is Update for the API tokens: the same fenced
// check-and-set write, of the meta key alone.
func (s *ConsulStore) UpdateTokens(fn func(tokens map[string]*rivorav1.ApiToken) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), consulTimeout)
	defer cancel()
	if err := s.finishPendingLocked(ctx); err != nil {
		return 0, err
	}
	next := cloneRecords(s.state.tokens)
	if err := fn(next); err != nil {
		return 0, err
	}
	return s.saveLocked(ctx, delta{tokens: wholeChanges(s.state.tokens, next)})
}

// Edges returns the registered edges, sorted by name.
func (s *ConsulStore) Edges() []*rivorav1.Edge {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedCopies(s.state.edges, nil)
}

// Edge returns a registered edge.
func (s *ConsulStore) Edge(name string) (*rivorav1.Edge, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return getCopy(s.state.edges, name)
}

// UpdateEdges is Update for the registered edges: like UpdateTokens, a
// fenced check-and-set write of the meta key alone.
func (s *ConsulStore) UpdateEdges(fn func(edges map[string]*rivorav1.Edge) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), consulTimeout)
	defer cancel()
	if err := s.finishPendingLocked(ctx); err != nil {
		return 0, err
	}
	next := cloneRecords(s.state.edges)
	if err := fn(next); err != nil {
		return 0, err
	}
	return s.saveLocked(ctx, delta{edges: wholeChanges(s.state.edges, next)})
}

// Update applies fn to the destinations and writes what it changed as
// the next config version: the meta key and the changed destinations'
// keys, checked-and-set on the meta key's ModifyIndex (and, when fenced,
// on the leader lock still being ours). If another writer got there
// first, Update reloads the state and returns ErrConflict; if the lock is
// gone, ErrNotLeader.
func (s *ConsulStore) Update(fn func(tx *DestinationTx) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), consulTimeout)
	defer cancel()
	if err := s.finishPendingLocked(ctx); err != nil {
		return 0, err
	}
	tx := newDestinationTx(&s.state)
	if err := fn(tx); err != nil {
		return 0, err
	}
	return s.saveLocked(ctx, tx.delta())
}

// saveLocked writes d as the next version.
func (s *ConsulStore) saveLocked(ctx context.Context, d delta) (uint64, error) {
	d.version = s.state.version + 1
	if s.legacy != 0 {
		d = s.everyDestinationLocked(d) // the new layout holds no destination yet
	}
	if err := s.writeLocked(ctx, d); err != nil {
		return 0, err
	}
	return d.version, nil
}

// everyDestinationLocked is d putting every stored destination it does
// not change: what migrating from the legacy layout writes.
func (s *ConsulStore) everyDestinationLocked(d delta) delta {
	all := make(map[string]*rivorav1.Destination, len(s.state.dests)+len(d.dests))
	for id, dest := range s.state.dests {
		all[id] = dest
	}
	for id, dest := range d.dests {
		all[id] = dest
	}
	for id, dest := range all {
		if dest == nil {
			if _, had := s.state.dests[id]; !had {
				delete(all, id)
			}
		}
	}
	d.dests = all
	return d
}

// metaAfter is the meta key's value once d is applied.
func (s *ConsulStore) metaAfter(d delta, pending uint64) ([]byte, error) {
	return encodeMeta(state{version: d.version, tokens: recordsAfter(s.state.tokens, d.tokens), edges: recordsAfter(s.state.edges, d.edges)}, pending)
}

// writeLocked writes d, which holds what differs from what Consul holds:
// in one transaction when it fits, else staged, committed and applied
// (see ConsulStore). It applies d to the state once written.
func (s *ConsulStore) writeLocked(ctx context.Context, d delta) error {
	changes, err := d.recordChanges()
	if err != nil {
		return err
	}
	refs := sortedRefs(changes)
	meta, err := s.metaAfter(d, 0)
	if err != nil {
		return err
	}
	if len(meta) > consulMaxValueBytes {
		return fmt.Errorf("save state: the version, API tokens and edges take %d bytes, over the %d a Consul transaction carries", len(meta), consulMaxValueBytes)
	}
	ops := s.guardOps(false)
	if s.garbage {
		ops = append(ops, kvOp(api.KVDeleteTree, consulPendingPrefix, nil, 0))
	}
	for _, ref := range refs {
		if raw := changes[ref]; raw != nil {
			ops = append(ops, kvOp(api.KVSet, ref.key(), raw, 0))
		} else {
			ops = append(ops, kvOp(api.KVDelete, ref.key(), nil, 0))
		}
	}
	ops = append(ops, kvOp(api.KVCAS, ConsulStateMetaKey, meta, s.index))
	if fits(ops) {
		index, err := s.commitLocked(ctx, ops)
		if err != nil {
			return err
		}
		s.state.apply(d)
		s.index, s.legacy, s.garbage = index, 0, false
		return nil
	}
	return s.writeStagedLocked(ctx, d, refs, changes)
}

// writeStagedLocked writes a change too large for one transaction: it
// stages it, commits it, then applies it.
func (s *ConsulStore) writeStagedLocked(ctx context.Context, d delta, refs []recordRef, changes map[recordRef][]byte) error {
	v := d.version
	staged := []*api.TxnOp{kvOp(api.KVDeleteTree, consulPendingPrefix, nil, 0)} // an earlier attempt's garbage
	for _, ref := range refs {
		staged = append(staged, kvOp(api.KVSet, ref.stagedKey(v), changes[ref], 0))
	}
	for _, batch := range batches(s.guardOps(true), staged) {
		if _, err := s.commitLocked(ctx, batch); err != nil {
			return err
		}
	}
	meta, err := s.metaAfter(d, v)
	if err != nil {
		return err
	}
	ops := append(s.guardOps(false), kvOp(api.KVCAS, ConsulStateMetaKey, meta, s.index))
	index, err := s.commitLocked(ctx, ops)
	if err != nil {
		return err
	}
	s.state.apply(d)
	s.index, s.legacy, s.garbage = index, 0, false
	s.pending, s.pendingRefs = v, refs
	// The change is committed; should applying it fail, the next write
	// (or the next leader) finishes it.
	_ = s.finishPendingLocked(ctx)
	return nil
}

// finishPendingLocked moves a committed change from pending/ to the
// records' keys, then drops it from the meta key.
func (s *ConsulStore) finishPendingLocked(ctx context.Context) error {
	if s.pending == 0 {
		return nil
	}
	var moves []*api.TxnOp
	for _, ref := range s.pendingRefs {
		raw, err := s.state.rawOf(ref)
		if err != nil {
			return err
		}
		if raw == nil {
			moves = append(moves, kvOp(api.KVDelete, ref.key(), nil, 0))
			continue
		}
		moves = append(moves, kvOp(api.KVSet, ref.key(), raw, 0))
	}
	for _, batch := range batches(s.guardOps(true), moves) {
		if _, err := s.commitLocked(ctx, batch); err != nil {
			return fmt.Errorf("apply the staged change %d: %w", s.pending, err)
		}
	}
	meta, err := encodeMeta(s.state, 0)
	if err != nil {
		return err
	}
	ops := append(s.guardOps(false), kvOp(api.KVCAS, ConsulStateMetaKey, meta, s.index), kvOp(api.KVDeleteTree, consulPendingPrefix, nil, 0))
	index, err := s.commitLocked(ctx, ops)
	if err != nil {
		return fmt.Errorf("apply the staged change %d: %w", s.pending, err)
	}
	s.index, s.pending, s.pendingRefs, s.garbage = index, 0, nil, false
	return nil
}

// guardOps are the checks that open every transaction: the fence (first,
// so its failure is told apart), the legacy key being as read, and, with
// checkMeta, the meta key being as read (a transaction that does not
// set it).
func (s *ConsulStore) guardOps(checkMeta bool) []*api.TxnOp {
	var ops []*api.TxnOp
	if s.fenceSession != "" {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: s.fenceKey, Session: s.fenceSession}})
	}
	switch {
	case s.legacy != 0 && checkMeta:
		ops = append(ops, kvOp(api.KVCheckIndex, ConsulLegacyStateKey, nil, s.legacy))
	case s.legacy != 0:
		// The transaction that creates the meta key ends the legacy one.
		ops = append(ops, kvOp(api.KVCAS, ConsulLegacyStateKey, []byte(ConsulLegacyTombstone), s.legacy))
	case s.index == 0:
		ops = append(ops, kvOp(api.KVCheckNotExists, ConsulLegacyStateKey, nil, 0))
	}
	if checkMeta {
		if s.index == 0 {
			ops = append(ops, kvOp(api.KVCheckNotExists, ConsulStateMetaKey, nil, 0))
		} else {
			ops = append(ops, kvOp(api.KVCheckIndex, ConsulStateMetaKey, nil, s.index))
		}
	}
	return ops
}

// commitLocked runs one transaction and returns the meta key's
// ModifyIndex after it (0 if it neither sets nor checks it).
func (s *ConsulStore) commitLocked(ctx context.Context, ops api.TxnOps) (uint64, error) {
	ok, resp, _, err := s.txn.Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		// The outcome is unknown; if it was written, the next write's
		// check-and-set fails and reloads.
		return 0, &consulError{"save state", err}
	}
	if !ok {
		for _, e := range resp.Errors {
			if s.fenceSession != "" && e.OpIndex == 0 {
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
		if r.KV != nil && r.KV.Key == ConsulStateMetaKey {
			index = r.KV.ModifyIndex
		}
	}
	if index == 0 && ops[len(ops)-1].KV.Key == ConsulStateMetaKey {
		return 0, fmt.Errorf("save state: Consul's answer has no index for %s", ConsulStateMetaKey)
	}
	return index, nil
}

func kvOp(verb api.KVOp, key string, value []byte, index uint64) *api.TxnOp {
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: verb, Key: key, Value: value, Index: index}}
}

func destKey(id string) string { return recordRef{kindDestination, id}.key() }

func pendingKey(version uint64, id string) string {
	return recordRef{kindDestination, id}.stagedKey(version)
}

func opBytes(op *api.TxnOp) int { return len(op.KV.Key) + len(op.KV.Value) + 64 }

// fits reports whether ops fit one Consul transaction.
func fits(ops []*api.TxnOp) bool {
	n := 0
	for _, op := range ops {
		n += opBytes(op)
	}
	return len(ops) <= consulTxnMaxOps && n <= consulTxnMaxBytes
}

// batches splits ops into transactions that each open with guard.
func batches(guard, ops []*api.TxnOp) [][]*api.TxnOp {
	var out [][]*api.TxnOp
	cur := slices.Clone(guard)
	for _, op := range ops {
		if len(cur) > len(guard) && !fits(append(slices.Clone(cur), op)) {
			out = append(out, cur)
			cur = slices.Clone(guard)
		}
		cur = append(cur, op)
	}
	if len(cur) > len(guard) {
		out = append(out, cur)
	}
	return out
}

// encodeMeta is the meta key's value for st.
func encodeMeta(st state, pending uint64) ([]byte, error) {
	m := consulMeta{Version: st.version, Pending: pending}
	for _, t := range sortedTokens(st.tokens) {
		raw, err := protojson.Marshal(t)
		if err != nil {
			return nil, err
		}
		m.Tokens = append(m.Tokens, raw)
	}
	var err error
	if m.Edges, err = encodeRecords(st.edges); err != nil {
		return nil, err
	}
	return json.MarshalIndent(m, "", "  ")
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
	value, err := encodeAuditEntry(e)
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
	var skipped skippedEntries
	for _, sp := range entries {
		e, err := decodeAuditEntry(sp.pair.Value)
		if err != nil {
			skipped.add(sp.pair.Key, err)
			continue
		}
		if destinationID != "" && e.GetDestinationId() != destinationID {
			continue
		}
		out = append(out, e)
	}
	skipped.log()
	return newest(out, limit), nil
}
