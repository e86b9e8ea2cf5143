package controlplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/internal/durable"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Store holds the control plane's state: the registered destinations, the
// subscriptions, the event-type catalogue, the API tokens (hashes, never
// tokens), the registered edges and the config version. FileStore keeps it in a file for a
// single control plane; ConsulStore keeps it in Consul KV, shared by
// several of which one leads.
type Store interface {
	// Snapshot returns the config version and every destination, sorted
	// by id. The destinations are copies.
	Snapshot() (uint64, []*rivorav1.Destination)
	// Contents returns copies of everything the agents' feed sends, at
	// one version.
	Contents() Contents
	// Get returns a copy of a destination.
	Get(id string) (*rivorav1.Destination, bool)
	// GetSubscription returns a copy of a subscription.
	GetSubscription(id string) (*rivorav1.Subscription, bool)
	// Subscriptions returns copies of the subscriptions keep accepts (nil:
	// all of them), sorted by id.
	Subscriptions(keep func(*rivorav1.Subscription) bool) []*rivorav1.Subscription
	// GetEventType returns a copy of an event type of the catalogue.
	GetEventType(name string) (*rivorav1.EventType, bool)
	// EventTypes returns copies of the catalogue, sorted by name.
	EventTypes() []*rivorav1.EventType
	// ChangedSince returns what changed after version since; ok is false
	// when the store no longer knows (too far behind, or the state was
	// reloaded): compare Contents then.
	ChangedSince(since uint64) (c Changes, ok bool)
	// Update applies fn to the state (through a DestinationTx, which
	// copies only what fn edits) and persists what it changed as the next
	// config version, which it returns. fn returns an error to change
	// nothing; so does a failed write.
	Update(fn func(tx *DestinationTx) error) (uint64, error)
	// Tokens returns copies of the API tokens, sorted by creation time.
	Tokens() []*rivorav1.ApiToken
	// UpdateTokens is Update for the API tokens (by id).
	UpdateTokens(fn func(tokens map[string]*rivorav1.ApiToken) error) (uint64, error)
	// Edges returns copies of the registered edges, sorted by name.
	Edges() []*rivorav1.Edge
	// Edge returns a copy of a registered edge.
	Edge(name string) (*rivorav1.Edge, bool)
	// UpdateEdges is Update for the registered edges (by name): like the
	// tokens, they are few and kept whole beside the version.
	UpdateEdges(fn func(edges map[string]*rivorav1.Edge) error) (uint64, error)
}

// Contents is the state the agents' feed sends on a snapshot: copies,
// sorted by id (event types by name).
type Contents struct {
	Version       uint64
	Destinations  []*rivorav1.Destination
	Subscriptions []*rivorav1.Subscription
	EventTypes    []*rivorav1.EventType
}

// Changes is what changed after a version (Store.ChangedSince): copies
// of the destinations and subscriptions changed, sorted by id, the ids of
// those deleted, and whether the catalogue changed.
type Changes struct {
	Version              uint64
	Destinations         []*rivorav1.Destination
	DeletedDestinations  []string
	Subscriptions        []*rivorav1.Subscription
	DeletedSubscriptions []string
	EventTypesChanged    bool
}

// state is what a Store holds.
type state struct {
	version uint64
	dests   map[string]*rivorav1.Destination
	// subs are the subscriptions by id, types the catalogue by name.
	subs   map[string]*rivorav1.Subscription
	types  map[string]*rivorav1.EventType
	tokens map[string]*rivorav1.ApiToken
	edges  map[string]*rivorav1.Edge
	// subsPerCustomer counts each customer's subscriptions, for the bound
	// on them: apply keeps it, a state loaded whole counts once
	// (countSubscriptions).
	subsPerCustomer map[string]int
	// journal is which destinations and subscriptions the latest versions
	// changed (apply records them), so that the agents' feed sends what
	// changed without comparing every one. A state loaded whole starts
	// it empty.
	journal []journalEntry
}

// journalEntry is what one version put or deleted.
type journalEntry struct {
	version uint64
	ids     []string // destinations
	subs    []string
	types   bool
}

// journalVersions bounds the journal: a feed further behind compares
// everything once.
const journalVersions = 1024

// journaled is what the journal says changed after a version.
type journaled struct {
	dests, subs []string
	types       bool
}

// journalSince lists, sorted, what changed after version since, and
// whether the journal covers every version since then.
func (st *state) journalSince(since uint64) (journaled, bool) {
	if since == st.version {
		return journaled{}, true
	}
	if since > st.version || len(st.journal) == 0 || st.journal[0].version > since+1 {
		return journaled{}, false
	}
	dests, subs := make(map[string]bool), make(map[string]bool)
	var j journaled
	for i := len(st.journal) - 1; i >= 0 && st.journal[i].version > since; i-- {
		for _, id := range st.journal[i].ids {
			dests[id] = true
		}
		for _, id := range st.journal[i].subs {
			subs[id] = true
		}
		j.types = j.types || st.journal[i].types
	}
	j.dests, j.subs = sortedKeys(dests), sortedKeys(subs)
	return j, true
}

// changedSince lists, sorted, the destinations changed after version
// since, and whether the journal covers every version since then.
func (st *state) changedSince(since uint64) ([]string, bool) {
	j, ok := st.journalSince(since)
	return j.dests, ok
}

func emptyState() state {
	return state{
		dests: make(map[string]*rivorav1.Destination), subs: make(map[string]*rivorav1.Subscription),
		types: make(map[string]*rivorav1.EventType), tokens: make(map[string]*rivorav1.ApiToken),
		edges: make(map[string]*rivorav1.Edge), subsPerCustomer: make(map[string]int),
	}
}

// countSubscriptions counts each customer's subscriptions afresh (after
// a load that filled subs directly).
func (st *state) countSubscriptions() {
	st.subsPerCustomer = make(map[string]int)
	for _, s := range st.subs {
		st.subsPerCustomer[s.GetCustomerId()]++
	}
}

// delta is what one change does to the state: the destinations,
// subscriptions, event types, API tokens and edges it puts (new or edited) and
// deletes (nil), by id (event types by name); nothing else. Both stores
// write only these, and apply them in place, so a change costs what it
// changes.
type delta struct {
	version uint64
	dests   map[string]*rivorav1.Destination
	subs    map[string]*rivorav1.Subscription
	types   map[string]*rivorav1.EventType
	tokens  map[string]*rivorav1.ApiToken
	edges   map[string]*rivorav1.Edge
}

// apply makes d part of st.
func (st *state) apply(d delta) {
	for id, sub := range d.subs {
		if old, ok := st.subs[id]; ok {
			st.subsPerCustomer[old.GetCustomerId()]--
			if st.subsPerCustomer[old.GetCustomerId()] == 0 {
				delete(st.subsPerCustomer, old.GetCustomerId())
			}
		}
		if !deleted(sub) {
			st.subsPerCustomer[sub.GetCustomerId()]++
		}
	}
	applyRecords(st.dests, d.dests)
	applyRecords(st.subs, d.subs)
	applyRecords(st.types, d.types)
	applyRecords(st.tokens, d.tokens)
	applyRecords(st.edges, d.edges)
	switch {
	case d.version != st.version+1:
		// Not the next version (a migration rewrites the current one):
		// what changed since an older version is not known any more.
		st.journal = nil
	case len(st.journal) == journalVersions:
		st.journal = st.journal[1:]
		fallthrough
	default:
		st.journal = append(st.journal, journalEntry{version: d.version, ids: sortedKeys(d.dests), subs: sortedKeys(d.subs), types: len(d.types) > 0})
	}
	st.version = d.version
}

// applyRecords puts changes into dst, deleting those that are nil.
func applyRecords[M proto.Message](dst, changes map[string]M) {
	for id, m := range changes {
		if deleted(m) {
			delete(dst, id)
		} else {
			dst[id] = m
		}
	}
}

// deleted reports whether m stands for a deleted record (nil).
func deleted(m proto.Message) bool { return m == nil || !m.ProtoReflect().IsValid() }

// recordsAfter is records as changes leave them (a new map; the records
// are shared): the tokens or edges a delta leaves.
func recordsAfter[M proto.Message](records, changes map[string]M) map[string]M {
	out := make(map[string]M, len(records))
	for id, m := range records {
		out[id] = m
	}
	applyRecords(out, changes)
	return out
}

// cloneRecords copies records deeply, for UpdateTokens and UpdateEdges
// to work on (there are few).
func cloneRecords[M proto.Message](records map[string]M) map[string]M {
	out := make(map[string]M, len(records))
	for id, m := range records {
		out[id] = proto.Clone(m).(M)
	}
	return out
}

// wholeChanges is the part of a delta from prev to next of a kind kept
// whole (tokens, edges): the new or changed records, and nil for the
// deleted.
func wholeChanges[M proto.Message](prev, next map[string]M) map[string]M {
	out := make(map[string]M)
	for id, m := range next {
		if p, ok := prev[id]; !ok || !proto.Equal(p, m) {
			out[id] = m
		}
	}
	for id := range prev {
		if _, ok := next[id]; !ok {
			var none M
			out[id] = none
		}
	}
	return out
}

// Records is one kind of record (destinations, subscriptions, event
// types) as one change sees it: reads see the stored records, and a
// record is copied only when the change edits it (Get) — never all of
// them. The stored records are never edited in place: they may be shared
// with readers until the change is applied.
type Records[M proto.Message] struct {
	key     func(M) string
	stored  map[string]M // the store's; read only
	touched map[string]M // put or edited, by id; nil: deleted
	// copies counts the stored records this change copied.
	copies int
}

func newRecords[M proto.Message](stored map[string]M, key func(M) string) *Records[M] {
	return &Records[M]{key: key, stored: stored, touched: make(map[string]M)}
}

// Get returns record id to read or edit: a copy of the stored one,
// private to this change (and what it will store), made on first use.
func (r *Records[M]) Get(id string) (M, bool) {
	if m, ok := r.touched[id]; ok {
		return m, !deleted(m)
	}
	m, ok := r.stored[id]
	if !ok {
		return m, false
	}
	c := proto.Clone(m).(M)
	r.touched[id], r.copies = c, r.copies+1
	return c, true
}

// Read returns record id to read only, copying nothing.
func (r *Records[M]) Read(id string) (M, bool) {
	if m, ok := r.touched[id]; ok {
		return m, !deleted(m)
	}
	m, ok := r.stored[id]
	return m, ok
}

// Has reports whether record id exists, copying nothing.
func (r *Records[M]) Has(id string) bool {
	if m, ok := r.touched[id]; ok {
		return !deleted(m)
	}
	_, ok := r.stored[id]
	return ok
}

// Put stores m (new, or replacing the record of its id).
func (r *Records[M]) Put(m M) { r.touched[r.key(m)] = m }

// Delete removes record id, if it exists.
func (r *Records[M]) Delete(id string) {
	var none M
	r.touched[id] = none
}

// Len is the number of records.
func (r *Records[M]) Len() int {
	n := len(r.stored)
	for id, m := range r.touched {
		_, had := r.stored[id]
		switch {
		case had && deleted(m):
			n--
		case !had && !deleted(m):
			n++
		}
	}
	return n
}

// Each calls fn with every record, in no order, to read only (edit
// through Get); it is for the rare change that looks at them all.
func (r *Records[M]) Each(fn func(m M)) {
	for id, m := range r.stored {
		if _, ok := r.touched[id]; !ok {
			fn(m)
		}
	}
	for _, m := range r.touched {
		if !deleted(m) {
			fn(m)
		}
	}
}

// changes is this kind's part of the change's delta: what it put that
// differs from what is stored, and nil for what it deleted.
func (r *Records[M]) changes() map[string]M {
	out := make(map[string]M, len(r.touched))
	for id, m := range r.touched {
		old, had := r.stored[id]
		if (deleted(m) && !had) || (!deleted(m) && had && proto.Equal(old, m)) {
			continue
		}
		out[id] = m
	}
	return out
}

// DestinationTx is one change to the state, as Store.Update hands it to
// its function: the destinations (its own methods), the subscriptions
// and the event types (Subscriptions, EventTypes), each a Records.
type DestinationTx struct {
	dests *Records[*rivorav1.Destination]
	subs  *Records[*rivorav1.Subscription]
	types *Records[*rivorav1.EventType]
	// subsPerCustomer is the store's count (read only).
	subsPerCustomer map[string]int
	// version is the config version the change becomes once saved.
	version uint64
}

// newDestinationTx is a change of st, saved (if at all) as the version
// after st's: the store holds its lock from here to the save.
func newDestinationTx(st *state) *DestinationTx {
	return &DestinationTx{
		dests:           newRecords(st.dests, (*rivorav1.Destination).GetId),
		subs:            newRecords(st.subs, (*rivorav1.Subscription).GetId),
		types:           newRecords(st.types, (*rivorav1.EventType).GetName),
		subsPerCustomer: st.subsPerCustomer,
		version:         st.version + 1,
	}
}

// Version is the config version this change becomes once saved.
func (tx *DestinationTx) Version() uint64 { return tx.version }

// CustomerSubscriptions counts customer's subscriptions as this change
// leaves them, without looking at every subscription.
func (tx *DestinationTx) CustomerSubscriptions(customer string) int {
	n := tx.subsPerCustomer[customer]
	for id, s := range tx.subs.touched {
		if old, had := tx.subs.stored[id]; had && old.GetCustomerId() == customer {
			n--
		}
		if !deleted(s) && s.GetCustomerId() == customer {
			n++
		}
	}
	return n
}

// Get returns destination id to read or edit (Records.Get).
func (tx *DestinationTx) Get(id string) (*rivorav1.Destination, bool) { return tx.dests.Get(id) }

// Has reports whether destination id exists, copying nothing.
func (tx *DestinationTx) Has(id string) bool { return tx.dests.Has(id) }

// Read returns destination id to read only, copying nothing.
func (tx *DestinationTx) Read(id string) (*rivorav1.Destination, bool) { return tx.dests.Read(id) }

// Put stores d (new, or replacing the destination of its id).
func (tx *DestinationTx) Put(d *rivorav1.Destination) { tx.dests.Put(d) }

// Delete removes destination id, if it exists.
func (tx *DestinationTx) Delete(id string) { tx.dests.Delete(id) }

// Len is the number of destinations.
func (tx *DestinationTx) Len() int { return tx.dests.Len() }

// Each calls fn with every destination, in no order, to read only (edit
// through Get); it is for the rare change that looks at them all.
func (tx *DestinationTx) Each(fn func(d *rivorav1.Destination)) { tx.dests.Each(fn) }

// Subscriptions are the change's subscriptions, by id.
func (tx *DestinationTx) Subscriptions() *Records[*rivorav1.Subscription] { return tx.subs }

// EventTypes are the change's event types, by name.
func (tx *DestinationTx) EventTypes() *Records[*rivorav1.EventType] { return tx.types }

// copies counts the stored records this change copied.
func (tx *DestinationTx) copies() int { return tx.dests.copies + tx.subs.copies + tx.types.copies }

// delta is the change as a delta (without its version).
func (tx *DestinationTx) delta() delta {
	return delta{dests: tx.dests.changes(), subs: tx.subs.changes(), types: tx.types.changes()}
}

// sortedTokens returns copies of tokens, oldest first (then by id).
func sortedTokens(tokens map[string]*rivorav1.ApiToken) []*rivorav1.ApiToken {
	out := make([]*rivorav1.ApiToken, 0, len(tokens))
	for _, t := range tokens {
		out = append(out, proto.Clone(t).(*rivorav1.ApiToken))
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].GetCreatedAt().AsTime(), out[j].GetCreatedAt().AsTime()
		if !a.Equal(b) {
			return a.Before(b)
		}
		return out[i].GetId() < out[j].GetId()
	})
	return out
}

// FileStore keeps the state under the state directory as a snapshot,
// controlplane.json (written atomically: temp file, fsync, rename), and a
// change log, controlplane.log (filelog.go): each change appends one
// record holding only what it changed, so a change to one destination
// writes that destination, not every one. The log is folded into a new
// snapshot once it outgrows it, which keeps the cost per change
// proportional to the change.
type FileStore struct {
	path string
	log  *changeLog

	mu    sync.Mutex
	state state
	// compactFailing: the last compaction failed (logged once).
	compactFailing bool
	// copies counts the destinations changes copied (DestinationTx.Get):
	// what a change costs in memory, for tests.
	copies int
}

var _ Store = (*FileStore)(nil)

// storeFile is the state's serialized form, in the file and in Consul KV
// alike.
type storeFile struct {
	Version      uint64            `json:"version"`
	Destinations []json.RawMessage `json:"destinations"`
	// Subscriptions and EventTypes: in the file only (Consul keeps a key
	// each).
	Subscriptions []json.RawMessage `json:"subscriptions,omitempty"`
	EventTypes    []json.RawMessage `json:"event_types,omitempty"`
	// Tokens are the API tokens: their hashes, never the tokens.
	Tokens []json.RawMessage `json:"tokens,omitempty"`
	// Edges are the registered edges, sorted by name.
	Edges []json.RawMessage `json:"edges,omitempty"`
}

// OpenStore loads (or creates) the state under dir: the snapshot, then
// the changes logged after it.
func OpenStore(dir string) (*FileStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	s := &FileStore{path: filepath.Join(dir, "controlplane.json"), state: emptyState()}
	data, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", s.path, err)
	default:
		st, err := decodeState(data)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", s.path, err)
		}
		s.state = st
	}
	s.log, err = openChangeLog(filepath.Join(dir, "controlplane.log"), &s.state, int64(len(data)))
	if err != nil {
		return nil, err
	}
	s.state.countSubscriptions() // the log's records filled subs directly
	return s, nil
}

func decodeState(data []byte) (state, error) {
	var f storeFile
	if err := json.Unmarshal(data, &f); err != nil {
		return state{}, err
	}
	st := emptyState()
	st.version = f.Version
	if err := decodeRecords("destinations", f.Destinations, st.dests, (*rivorav1.Destination).GetId); err != nil {
		return state{}, err
	}
	if err := decodeRecords("subscriptions", f.Subscriptions, st.subs, (*rivorav1.Subscription).GetId); err != nil {
		return state{}, err
	}
	if err := decodeRecords("event_types", f.EventTypes, st.types, (*rivorav1.EventType).GetName); err != nil {
		return state{}, err
	}
	if err := decodeRecords("tokens", f.Tokens, st.tokens, (*rivorav1.ApiToken).GetId); err != nil {
		return state{}, err
	}
	if err := decodeRecords("edges", f.Edges, st.edges, (*rivorav1.Edge).GetName); err != nil {
		return state{}, err
	}
	st.countSubscriptions()
	return st, nil
}

// decodeRecords decodes protojson records into into, by key.
func decodeRecords[M proto.Message](what string, raws []json.RawMessage, into map[string]M, key func(M) string) error {
	for i, raw := range raws {
		m := newRecord[M]()
		if err := protojson.Unmarshal(raw, m); err != nil {
			return fmt.Errorf("%s[%d]: %w", what, i, err)
		}
		into[key(m)] = m
	}
	return nil
}

// newRecord is a new, empty M (a pointer to a message).
func newRecord[M proto.Message]() M {
	var zero M
	return zero.ProtoReflect().New().Interface().(M)
}

// encodeRecords is the protojson of records, sorted by key.
func encodeRecords[M proto.Message](records map[string]M) ([]json.RawMessage, error) {
	var out []json.RawMessage
	for _, k := range sortedKeys(records) {
		raw, err := protojson.Marshal(records[k])
		if err != nil {
			return nil, err
		}
		out = append(out, raw)
	}
	return out, nil
}

func encodeState(st state) ([]byte, error) {
	f := storeFile{Version: st.version}
	var err error
	if f.Destinations, err = encodeRecords(st.dests); err != nil {
		return nil, err
	}
	if f.Subscriptions, err = encodeRecords(st.subs); err != nil {
		return nil, err
	}
	if f.EventTypes, err = encodeRecords(st.types); err != nil {
		return nil, err
	}
	for _, t := range sortedTokens(st.tokens) {
		raw, err := protojson.Marshal(t)
		if err != nil {
			return nil, err
		}
		f.Tokens = append(f.Tokens, raw)
	}
	if f.Edges, err = encodeRecords(st.edges); err != nil {
		return nil, err
	}
	return json.MarshalIndent(f, "", "  ")
}

// sortedDests returns copies of dests, sorted by id.
func sortedDests(dests map[string]*rivorav1.Destination) []*rivorav1.Destination {
	return sortedCopies(dests, nil)
}

// sortedCopies returns copies of the records keep accepts (nil: all),
// sorted by key.
func sortedCopies[M proto.Message](records map[string]M, keep func(M) bool) []M {
	keys := make([]string, 0, len(records))
	for k, m := range records {
		if keep == nil || keep(m) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]M, len(keys))
	for i, k := range keys {
		out[i] = proto.Clone(records[k]).(M)
	}
	return out
}

func getDest(dests map[string]*rivorav1.Destination, id string) (*rivorav1.Destination, bool) {
	return getCopy(dests, id)
}

// getCopy returns a copy of record id.
func getCopy[M proto.Message](records map[string]M, id string) (M, bool) {
	m, ok := records[id]
	if !ok {
		return m, false
	}
	return proto.Clone(m).(M), true
}

// contents is Store.Contents for st.
func (st *state) contents() Contents {
	return Contents{Version: st.version, Destinations: sortedDests(st.dests), Subscriptions: sortedCopies(st.subs, nil), EventTypes: sortedCopies(st.types, nil)}
}

// changes is Store.ChangedSince for st.
func (st *state) changes(since uint64) (Changes, bool) {
	j, ok := st.journalSince(since)
	if !ok {
		return Changes{Version: st.version}, false
	}
	c := Changes{Version: st.version, EventTypesChanged: j.types}
	for _, id := range j.dests {
		if d, ok := getDest(st.dests, id); ok {
			c.Destinations = append(c.Destinations, d)
		} else {
			c.DeletedDestinations = append(c.DeletedDestinations, id)
		}
	}
	for _, id := range j.subs {
		if sub, ok := getCopy(st.subs, id); ok {
			c.Subscriptions = append(c.Subscriptions, sub)
		} else {
			c.DeletedSubscriptions = append(c.DeletedSubscriptions, id)
		}
	}
	return c, true
}

// Snapshot returns the config version and every destination, sorted by id.
func (s *FileStore) Snapshot() (uint64, []*rivorav1.Destination) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.version, sortedDests(s.state.dests)
}

// Contents returns everything the agents' feed sends, at one version.
func (s *FileStore) Contents() Contents {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.contents()
}

// ChangedSince returns what changed after version since (see Store).
func (s *FileStore) ChangedSince(since uint64) (Changes, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.changes(since)
}

// Get returns a destination.
func (s *FileStore) Get(id string) (*rivorav1.Destination, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return getDest(s.state.dests, id)
}

// GetSubscription returns a subscription.
func (s *FileStore) GetSubscription(id string) (*rivorav1.Subscription, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return getCopy(s.state.subs, id)
}

// Subscriptions returns the subscriptions keep accepts, sorted by id.
func (s *FileStore) Subscriptions(keep func(*rivorav1.Subscription) bool) []*rivorav1.Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedCopies(s.state.subs, keep)
}

// GetEventType returns an event type of the catalogue.
func (s *FileStore) GetEventType(name string) (*rivorav1.EventType, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return getCopy(s.state.types, name)
}

// EventTypes returns the catalogue, sorted by name.
func (s *FileStore) EventTypes() []*rivorav1.EventType {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedCopies(s.state.types, nil)
}

// Tokens returns the API tokens, oldest first.
func (s *FileStore) Tokens() []*rivorav1.ApiToken {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedTokens(s.state.tokens)
}

// Update applies fn to the state under the store lock and persists what
// it changed as the next config version. fn returns an error to change
// nothing.
func (s *FileStore) Update(fn func(tx *DestinationTx) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx := newDestinationTx(&s.state)
	if err := fn(tx); err != nil {
		return 0, err
	}
	s.copies += tx.copies()
	return s.saveLocked(tx.delta())
}

// UpdateTokens is Update for the API tokens.
func (s *FileStore) UpdateTokens(fn func(tokens map[string]*rivorav1.ApiToken) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := cloneRecords(s.state.tokens)
	if err := fn(next); err != nil {
		return 0, err
	}
	return s.saveLocked(delta{tokens: wholeChanges(s.state.tokens, next)})
}

// Edges returns the registered edges, sorted by name.
func (s *FileStore) Edges() []*rivorav1.Edge {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedCopies(s.state.edges, nil)
}

// Edge returns a registered edge.
func (s *FileStore) Edge(name string) (*rivorav1.Edge, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return getCopy(s.state.edges, name)
}

// UpdateEdges is Update for the registered edges.
func (s *FileStore) UpdateEdges(fn func(edges map[string]*rivorav1.Edge) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := cloneRecords(s.state.edges)
	if err := fn(next); err != nil {
		return 0, err
	}
	return s.saveLocked(delta{edges: wholeChanges(s.state.edges, next)})
}

// saveLocked logs d as the next version, then applies it.
func (s *FileStore) saveLocked(d delta) (uint64, error) {
	d.version = s.state.version + 1
	if err := s.log.append(d); err != nil {
		return 0, err
	}
	s.state.apply(d)
	if s.log.due() {
		// The change is durable in the log already: a failed compaction
		// is retried on the next change, and never fails this one; it
		// is logged once per run of failures.
		err := s.compactLocked()
		if err != nil && !s.compactFailing {
			slog.Warn("compact the control plane's state log (retried on the next change; the log keeps growing meanwhile)", "path", s.path, "error", err)
		}
		s.compactFailing = err != nil
	}
	return d.version, nil
}

// compactLocked writes the snapshot, then empties the log. A crash in
// between leaves log records the snapshot already holds; loading skips
// them (their versions are not above the snapshot's).
func (s *FileStore) compactLocked() error {
	data, err := encodeState(s.state)
	if err != nil {
		return err
	}
	if err := durable.WriteFile(s.path, data); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return s.log.reset(int64(len(data)))
}
