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

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Store holds the control plane's state: the registered destinations, the
// API tokens (hashes, never tokens) and the config version. FileStore keeps it in a file for a single control
// plane; ConsulStore keeps it in Consul KV, shared by several of which one
// leads.
type Store interface {
	// Snapshot returns the config version and every destination, sorted
	// by id. The destinations are copies.
	Snapshot() (uint64, []*rivorav1.Destination)
	// Get returns a copy of a destination.
	Get(id string) (*rivorav1.Destination, bool)
	// ChangedSince returns the config version, copies of the
	// destinations changed after version since (sorted by id) and the
	// ids of those deleted since; ok is false when the store no longer
	// knows (too far behind, or the state was reloaded): compare a
	// Snapshot then.
	ChangedSince(since uint64) (version uint64, changed []*rivorav1.Destination, deleted []string, ok bool)
	// Update applies fn to the destinations (through a DestinationTx,
	// which copies only what fn edits) and persists what it changed as
	// the next config version, which it returns. fn returns an error to
	// change nothing; so does a failed write.
	Update(fn func(tx *DestinationTx) error) (uint64, error)
	// Tokens returns copies of the API tokens, sorted by creation time.
	Tokens() []*rivorav1.ApiToken
	// UpdateTokens is Update for the API tokens (by id).
	UpdateTokens(fn func(tokens map[string]*rivorav1.ApiToken) error) (uint64, error)
}

// state is what a Store holds.
type state struct {
	version uint64
	dests   map[string]*rivorav1.Destination
	tokens  map[string]*rivorav1.ApiToken
	// journal is which destinations the latest versions changed (apply
	// records them), so that the agents' feed sends what changed without
	// comparing every destination. A state loaded whole starts it empty.
	journal []journalEntry
}

// journalEntry is the destinations one version put or deleted.
type journalEntry struct {
	version uint64
	ids     []string
}

// journalVersions bounds the journal: a feed further behind compares
// everything once.
const journalVersions = 1024

// changedSince lists, sorted, the destinations changed after version
// since, and whether the journal covers every version since then.
func (st *state) changedSince(since uint64) ([]string, bool) {
	if since == st.version {
		return nil, true
	}
	if since > st.version || len(st.journal) == 0 || st.journal[0].version > since+1 {
		return nil, false
	}
	seen := make(map[string]bool)
	for i := len(st.journal) - 1; i >= 0 && st.journal[i].version > since; i-- {
		for _, id := range st.journal[i].ids {
			seen[id] = true
		}
	}
	return sortedKeys(seen), true
}

func emptyState() state {
	return state{dests: make(map[string]*rivorav1.Destination), tokens: make(map[string]*rivorav1.ApiToken)}
}

// delta is what one change does to the state: the destinations and API
// tokens it puts (new or edited) and deletes (nil), by id; nothing else.
// Both stores write only these, and apply them in place, so a change
// costs what it changes.
type delta struct {
	version uint64
	dests   map[string]*rivorav1.Destination
	tokens  map[string]*rivorav1.ApiToken
}

// apply makes d part of st.
func (st *state) apply(d delta) {
	for id, dest := range d.dests {
		if dest == nil {
			delete(st.dests, id)
		} else {
			st.dests[id] = dest
		}
	}
	for id, t := range d.tokens {
		if t == nil {
			delete(st.tokens, id)
		} else {
			st.tokens[id] = t
		}
	}
	switch {
	case d.version != st.version+1:
		// Not the next version (a migration rewrites the current one):
		// what changed since an older version is not known any more.
		st.journal = nil
	case len(st.journal) == journalVersions:
		st.journal = st.journal[1:]
		fallthrough
	default:
		st.journal = append(st.journal, journalEntry{version: d.version, ids: sortedKeys(d.dests)})
	}
	st.version = d.version
}

// tokensAfter is tokens as d leaves them (a new map; the tokens are
// shared).
func (d delta) tokensAfter(tokens map[string]*rivorav1.ApiToken) map[string]*rivorav1.ApiToken {
	out := make(map[string]*rivorav1.ApiToken, len(tokens))
	for id, t := range tokens {
		out[id] = t
	}
	for id, t := range d.tokens {
		if t == nil {
			delete(out, id)
		} else {
			out[id] = t
		}
	}
	return out
}

// cloneTokens copies tokens deeply, for UpdateTokens to work on (there
// are few).
func cloneTokens(tokens map[string]*rivorav1.ApiToken) map[string]*rivorav1.ApiToken {
	out := make(map[string]*rivorav1.ApiToken, len(tokens))
	for id, t := range tokens {
		out[id] = proto.Clone(t).(*rivorav1.ApiToken)
	}
	return out
}

// tokenChanges is the tokens part of a delta from prev to next: the new
// or changed ones, and nil for the deleted.
func tokenChanges(prev, next map[string]*rivorav1.ApiToken) map[string]*rivorav1.ApiToken {
	out := make(map[string]*rivorav1.ApiToken)
	for id, t := range next {
		if p, ok := prev[id]; !ok || !proto.Equal(p, t) {
			out[id] = t
		}
	}
	for id := range prev {
		if _, ok := next[id]; !ok {
			out[id] = nil
		}
	}
	return out
}

// DestinationTx is one change to the destinations, as Store.Update hands
// it to its function: reads see the stored destinations, and a
// destination is copied only when the change edits it (Get) — never all
// of them. The stored destinations are never edited in place: they may be
// shared with readers until the change is applied.
type DestinationTx struct {
	stored  map[string]*rivorav1.Destination // the store's; read only
	touched map[string]*rivorav1.Destination // put or edited, by id; nil: deleted
	// copies counts the stored destinations this change copied.
	copies int
}

func newDestinationTx(stored map[string]*rivorav1.Destination) *DestinationTx {
	return &DestinationTx{stored: stored, touched: make(map[string]*rivorav1.Destination)}
}

// Get returns destination id to read or edit: a copy of the stored one,
// private to this change (and what it will store), made on first use.
func (tx *DestinationTx) Get(id string) (*rivorav1.Destination, bool) {
	if d, ok := tx.touched[id]; ok {
		return d, d != nil
	}
	d, ok := tx.stored[id]
	if !ok {
		return nil, false
	}
	c := proto.Clone(d).(*rivorav1.Destination)
	tx.touched[id], tx.copies = c, tx.copies+1
	return c, true
}

// Has reports whether destination id exists, copying nothing.
func (tx *DestinationTx) Has(id string) bool {
	if d, ok := tx.touched[id]; ok {
		return d != nil
	}
	_, ok := tx.stored[id]
	return ok
}

// Put stores d (new, or replacing the destination of its id).
func (tx *DestinationTx) Put(d *rivorav1.Destination) { tx.touched[d.GetId()] = d }

// Delete removes destination id, if it exists.
func (tx *DestinationTx) Delete(id string) { tx.touched[id] = nil }

// Len is the number of destinations.
func (tx *DestinationTx) Len() int {
	n := len(tx.stored)
	for id, d := range tx.touched {
		_, had := tx.stored[id]
		switch {
		case had && d == nil:
			n--
		case !had && d != nil:
			n++
		}
	}
	return n
}

// Each calls fn with every destination, in no order, to read only (edit
// through Get); it is for the rare change that looks at them all.
func (tx *DestinationTx) Each(fn func(d *rivorav1.Destination)) {
	for id, d := range tx.stored {
		if _, ok := tx.touched[id]; !ok {
			fn(d)
		}
	}
	for _, d := range tx.touched {
		if d != nil {
			fn(d)
		}
	}
}

// changes is the destinations part of the change's delta: what it put
// that differs from what is stored, and nil for what it deleted.
func (tx *DestinationTx) changes() map[string]*rivorav1.Destination {
	out := make(map[string]*rivorav1.Destination, len(tx.touched))
	for id, d := range tx.touched {
		old, had := tx.stored[id]
		if (d == nil && !had) || (d != nil && had && proto.Equal(old, d)) {
			continue
		}
		out[id] = d
	}
	return out
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
	// Tokens are the API tokens: their hashes, never the tokens.
	Tokens []json.RawMessage `json:"tokens,omitempty"`
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
	return s, nil
}

func decodeState(data []byte) (state, error) {
	var f storeFile
	if err := json.Unmarshal(data, &f); err != nil {
		return state{}, err
	}
	st := emptyState()
	st.version = f.Version
	for i, raw := range f.Destinations {
		d := &rivorav1.Destination{}
		if err := protojson.Unmarshal(raw, d); err != nil {
			return state{}, fmt.Errorf("destinations[%d]: %w", i, err)
		}
		st.dests[d.GetId()] = d
	}
	for i, raw := range f.Tokens {
		t := &rivorav1.ApiToken{}
		if err := protojson.Unmarshal(raw, t); err != nil {
			return state{}, fmt.Errorf("tokens[%d]: %w", i, err)
		}
		st.tokens[t.GetId()] = t
	}
	return st, nil
}

func encodeState(st state) ([]byte, error) {
	f := storeFile{Version: st.version}
	for _, d := range sortedDests(st.dests) {
		raw, err := protojson.Marshal(d)
		if err != nil {
			return nil, err
		}
		f.Destinations = append(f.Destinations, raw)
	}
	for _, t := range sortedTokens(st.tokens) {
		raw, err := protojson.Marshal(t)
		if err != nil {
			return nil, err
		}
		f.Tokens = append(f.Tokens, raw)
	}
	return json.MarshalIndent(f, "", "  ")
}

// sortedDests returns copies of dests, sorted by id.
func sortedDests(dests map[string]*rivorav1.Destination) []*rivorav1.Destination {
	out := make([]*rivorav1.Destination, 0, len(dests))
	for _, d := range dests {
		out = append(out, proto.Clone(d).(*rivorav1.Destination))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out
}

func getDest(dests map[string]*rivorav1.Destination, id string) (*rivorav1.Destination, bool) {
	d, ok := dests[id]
	if !ok {
		return nil, false
	}
	return proto.Clone(d).(*rivorav1.Destination), true
}

// Snapshot returns the config version and every destination, sorted by id.
func (s *FileStore) Snapshot() (uint64, []*rivorav1.Destination) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.version, sortedDests(s.state.dests)
}

// ChangedSince returns what changed after version since (see Store).
func (s *FileStore) ChangedSince(since uint64) (uint64, []*rivorav1.Destination, []string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.changes(since)
}

// changes is ChangedSince for st.
func (st *state) changes(since uint64) (uint64, []*rivorav1.Destination, []string, bool) {
	ids, ok := st.changedSince(since)
	if !ok {
		return st.version, nil, nil, false
	}
	var changed []*rivorav1.Destination
	var deleted []string
	for _, id := range ids {
		if d, ok := getDest(st.dests, id); ok {
			changed = append(changed, d)
		} else {
			deleted = append(deleted, id)
		}
	}
	return st.version, changed, deleted, true
}

// Get returns a destination.
func (s *FileStore) Get(id string) (*rivorav1.Destination, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return getDest(s.state.dests, id)
}

// Tokens returns the API tokens, oldest first.
func (s *FileStore) Tokens() []*rivorav1.ApiToken {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedTokens(s.state.tokens)
}

// Update applies fn to the destinations under the store lock and
// persists what it changed as the next config version. fn returns an
// error to change nothing.
func (s *FileStore) Update(fn func(tx *DestinationTx) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx := newDestinationTx(s.state.dests)
	if err := fn(tx); err != nil {
		return 0, err
	}
	s.copies += tx.copies
	return s.saveLocked(delta{dests: tx.changes()})
}

// UpdateTokens is Update for the API tokens.
func (s *FileStore) UpdateTokens(fn func(tokens map[string]*rivorav1.ApiToken) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := cloneTokens(s.state.tokens)
	if err := fn(next); err != nil {
		return 0, err
	}
	return s.saveLocked(delta{tokens: tokenChanges(s.state.tokens, next)})
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
	if err := writeFileAtomic(s.path, data); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return s.log.reset(int64(len(data)))
}

// writeFileAtomic replaces path with data: temp file, fsync, rename, then
// fsync of the directory so the rename survives a crash.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
