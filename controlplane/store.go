package controlplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Store keeps the control plane's state — the registered destinations and
// the config version — in one JSON file under the state directory, written
// atomically (temp file, fsync, rename).
type Store struct {
	path string

	mu      sync.Mutex
	version uint64
	dests   map[string]*rivorav1.Destination
}

type storeFile struct {
	Version      uint64            `json:"version"`
	Destinations []json.RawMessage `json:"destinations"`
}

// OpenStore loads (or creates) the state under dir.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	s := &Store{path: filepath.Join(dir, "controlplane.json"), dests: make(map[string]*rivorav1.Destination)}
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.path, err)
	}
	var f storeFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse %s: %w", s.path, err)
	}
	for i, raw := range f.Destinations {
		d := &rivorav1.Destination{}
		if err := protojson.Unmarshal(raw, d); err != nil {
			return nil, fmt.Errorf("parse %s: destinations[%d]: %w", s.path, i, err)
		}
		s.dests[d.GetId()] = d
	}
	s.version = f.Version
	return s, nil
}

// Snapshot returns the config version and every destination, sorted by id.
func (s *Store) Snapshot() (uint64, []*rivorav1.Destination) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, s.sortedLocked()
}

func (s *Store) sortedLocked() []*rivorav1.Destination {
	out := make([]*rivorav1.Destination, 0, len(s.dests))
	for _, d := range s.dests {
		out = append(out, proto.Clone(d).(*rivorav1.Destination))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out
}

// Get returns a destination.
func (s *Store) Get(id string) (*rivorav1.Destination, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.dests[id]
	if !ok {
		return nil, false
	}
	return proto.Clone(d).(*rivorav1.Destination), true
}

// Update applies fn to a copy of the destinations under the store lock and
// persists the result as the next config version. fn returns an error to
// change nothing.
func (s *Store) Update(fn func(dests map[string]*rivorav1.Destination) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]*rivorav1.Destination, len(s.dests))
	for id, d := range s.dests {
		next[id] = proto.Clone(d).(*rivorav1.Destination)
	}
	if err := fn(next); err != nil {
		return 0, err
	}
	prev, prevVersion := s.dests, s.version
	s.dests, s.version = next, s.version+1
	if err := s.saveLocked(); err != nil {
		s.dests, s.version = prev, prevVersion
		return 0, err
	}
	return s.version, nil
}

func (s *Store) saveLocked() error {
	f := storeFile{Version: s.version}
	for _, d := range s.sortedLocked() {
		raw, err := protojson.Marshal(d)
		if err != nil {
			return err
		}
		f.Destinations = append(f.Destinations, raw)
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.path), ".controlplane-*")
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("save state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("save state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}
