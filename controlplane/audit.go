package controlplane

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// AuditLog is the append-only record of configuration changes. FileAuditLog
// keeps it beside a FileStore, ConsulAuditLog in Consul KV beside a
// ConsulStore.
type AuditLog interface {
	// Append records one entry durably.
	Append(e *rivorav1.AuditEntry) error
	// List returns the newest limit entries (all when limit <= 0), oldest
	// first, optionally only those of one destination.
	List(limit int, destinationID string) ([]*rivorav1.AuditEntry, error)
}

// FileAuditLog keeps one protojson AuditEntry per line in audit.ndjson
// under the state directory.
type FileAuditLog struct {
	path string
	mu   sync.Mutex
}

var _ AuditLog = (*FileAuditLog)(nil)

// OpenAuditLog opens (or creates) the audit log under dir.
func OpenAuditLog(dir string) (*FileAuditLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	a := &FileAuditLog{path: filepath.Join(dir, "audit.ndjson")}
	f, err := os.OpenFile(a.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	return a, f.Close()
}

// Append records one entry durably.
func (a *FileAuditLog) Append(e *rivorav1.AuditEntry) error {
	line, err := protojson.Marshal(e)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	f, err := os.OpenFile(a.path, os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("append audit entry: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("append audit entry: %w", err)
	}
	return f.Sync()
}

// List returns the newest limit entries (all when limit <= 0), oldest
// first, optionally only those of one destination.
func (a *FileAuditLog) List(limit int, destinationID string) ([]*rivorav1.AuditEntry, error) {
	a.mu.Lock()
	data, err := os.ReadFile(a.path)
	a.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	var out []*rivorav1.AuditEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		e := &rivorav1.AuditEntry{}
		if err := protojson.Unmarshal(sc.Bytes(), e); err != nil {
			return nil, fmt.Errorf("audit log line %d: %w", n, err)
		}
		if destinationID != "" && e.GetDestinationId() != destinationID {
			continue
		}
		out = append(out, e)
	}
	return newest(out, limit), sc.Err()
}

// newest keeps the last limit entries (all when limit <= 0).
func newest(entries []*rivorav1.AuditEntry, limit int) []*rivorav1.AuditEntry {
	if limit > 0 && len(entries) > limit {
		return entries[len(entries)-limit:]
	}
	return entries
}
