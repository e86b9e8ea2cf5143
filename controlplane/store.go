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

// Store holds the control plane's state: the registered destinations and
// the config version. FileStore keeps it in a file for a single control
// plane; ConsulStore keeps it in Consul KV, shared by several of which one
// leads.
type Store interface {
	// Snapshot returns the config version and every destination, sorted
	// by id. The destinations are copies.
	Snapshot() (uint64, []*rivorav1.Destination)
	// Get returns a copy of a destination.
	Get(id string) (*rivorav1.Destination, bool)
	// Update applies fn to a copy of the destinations and persists the
	// result as the next config version, which it returns. fn returns an
	// error to change nothing; so does a failed write.
	Update(fn func(dests map[string]*rivorav1.Destination) error) (uint64, error)
}

// FileStore keeps the state in one JSON file under the state directory,
// written atomically (temp file, fsync, rename).
type FileStore struct {
	path string

	mu      sync.Mutex
	version uint64
	dests   map[string]*rivorav1.Destination
}

var _ Store = (*FileStore)(nil)

// storeFile is the state's serialized form, in the file and in Consul KV
// alike.
type storeFile struct {
	Version      uint64            `json:"version"`
	Destinations []json.RawMessage `json:"destinations"`
}

// OpenStore loads (or creates) the state under dir.
func OpenStore(dir string) (*FileStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	s := &FileStore{path: filepath.Join(dir, "controlplane.json"), dests: make(map[string]*rivorav1.Destination)}
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.path, err)
	}
	version, dests, err := decodeState(data)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", s.path, err)
	}
	s.version, s.dests = version, dests
	return s, nil
}

func decodeState(data []byte) (uint64, map[string]*rivorav1.Destination, error) {
	var f storeFile
	if err := json.Unmarshal(data, &f); err != nil {
		return 0, nil, err
	}
	dests := make(map[string]*rivorav1.Destination, len(f.Destinations))
	for i, raw := range f.Destinations {
		d := &rivorav1.Destination{}
		if err := protojson.Unmarshal(raw, d); err != nil {
			return 0, nil, fmt.Errorf("destinations[%d]: %w", i, err)
		}
		dests[d.GetId()] = d
	}
	return f.Version, dests, nil
}

func encodeState(version uint64, dests map[string]*rivorav1.Destination) ([]byte, error) {
	f := storeFile{Version: version}
	for _, d := range sortedDests(dests) {
		raw, err := protojson.Marshal(d)
		if err != nil {
			return nil, err
		}
		f.Destinations = append(f.Destinations, raw)
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

func cloneDests(dests map[string]*rivorav1.Destination) map[string]*rivorav1.Destination {
	out := make(map[string]*rivorav1.Destination, len(dests))
	for id, d := range dests {
		out[id] = proto.Clone(d).(*rivorav1.Destination)
	}
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
	return s.version, sortedDests(s.dests)
}

// Get returns a destination.
func (s *FileStore) Get(id string) (*rivorav1.Destination, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return getDest(s.dests, id)
}

// Update applies fn to a copy of the destinations under the store lock and
// persists the result as the next config version. fn returns an error to
// change nothing.
func (s *FileStore) Update(fn func(dests map[string]*rivorav1.Destination) error) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := cloneDests(s.dests)
	if err := fn(next); err != nil {
		return 0, err
	}
	if err := s.save(s.version+1, next); err != nil {
		return 0, err
	}
	s.dests, s.version = next, s.version+1
	return s.version, nil
}

func (s *FileStore) save(version uint64, dests map[string]*rivorav1.Destination) error {
	data, err := encodeState(version, dests)
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
