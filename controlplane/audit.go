package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/rivora/rivora/internal/bounds"
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

// OpenAuditLog opens (or creates) the audit log under dir. It is the
// operators' only, mode 0600 as the other state files: its details hold
// destination URLs, whose query may carry a partner's credential
// (?apikey=…). A log an older version made 0644 is made 0600.
func OpenAuditLog(dir string) (*FileAuditLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	a := &FileAuditLog{path: filepath.Join(dir, "audit.ndjson")}
	f, err := os.OpenFile(a.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	if err := f.Chmod(0o600); err != nil && !errors.Is(err, fs.ErrPermission) {
		f.Close()
		return nil, fmt.Errorf("audit log %s: make it 0600: %w", a.path, err)
	}
	// A log another user owns (a rotation's `create 0640 root rivora`)
	// keeps the mode its owner gave it; the control plane warns when that
	// lets anyone read it (OthersMayRead).
	return a, f.Close()
}

// OthersMayRead reports the log's mode when it lets users other than its
// owner and group read it (a log another user owns, made so by them).
func (a *FileAuditLog) OthersMayRead() (fs.FileMode, bool) {
	info, err := os.Stat(a.path)
	if err != nil {
		return 0, false
	}
	return info.Mode().Perm(), info.Mode().Perm()&0o004 != 0
}

// Append records one entry durably.
func (a *FileAuditLog) Append(e *rivorav1.AuditEntry) error {
	line, err := encodeAuditEntry(e)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	f, err := os.OpenFile(a.path, os.O_APPEND|os.O_WRONLY, 0o600)
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
// first, optionally only those of one destination. A line it cannot read
// (damaged, or over maxAuditLine) is skipped and logged, never fatal:
// one bad line must not hide the rest of the log.
func (a *FileAuditLog) List(limit int, destinationID string) ([]*rivorav1.AuditEntry, error) {
	a.mu.Lock()
	data, err := os.ReadFile(a.path)
	a.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	var out []*rivorav1.AuditEntry
	var skipped skippedEntries
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		e, err := decodeAuditEntry(line)
		if err != nil {
			skipped.add(fmt.Sprintf("%s:%d", a.path, n), err)
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

// encodeAuditEntry is e as stored, its free text cut so that the record
// stays under maxAuditLine whoever wrote it (record bounds its own
// entries already; this is the last line).
func encodeAuditEntry(e *rivorav1.AuditEntry) ([]byte, error) {
	raw, err := protojson.Marshal(e)
	if err != nil || len(raw) <= maxAuditLine {
		return raw, err
	}
	c := proto.Clone(e).(*rivorav1.AuditEntry)
	c.Detail, c.Reason = bounds.Truncate(c.Detail, bounds.AuditDetail), bounds.Truncate(c.Reason, bounds.Text)
	c.Author, c.TokenId, c.Action, c.DestinationId = bounds.Truncate(c.Author, bounds.Name), bounds.Truncate(c.TokenId, bounds.Name), bounds.Truncate(c.Action, bounds.Name), bounds.Truncate(c.DestinationId, bounds.Name)
	return protojson.Marshal(c)
}

// maxAuditLine bounds an audit record a reader takes. Entries are bounded
// when written (record, encodeAuditEntry: some 19 KiB of text, up to six
// times that escaped); a longer one was written before that, or is
// damage.
const maxAuditLine = 256 << 10

// decodeAuditEntry reads one stored entry.
func decodeAuditEntry(raw []byte) (*rivorav1.AuditEntry, error) {
	if len(raw) > maxAuditLine {
		return nil, fmt.Errorf("entry is %d bytes, over the %d a reader takes", len(raw), maxAuditLine)
	}
	e := &rivorav1.AuditEntry{}
	if err := protojson.Unmarshal(raw, e); err != nil {
		return nil, err
	}
	return e, nil
}

// skippedEntries counts the audit records a List could not read; log
// reports them in one line.
type skippedEntries struct {
	n     int
	first string
	err   error
}

func (s *skippedEntries) add(where string, err error) {
	if s.n == 0 {
		s.first, s.err = where, err
	}
	s.n++
}

func (s *skippedEntries) log() {
	if s.n > 0 {
		slog.Warn("audit log: skipped entries that cannot be read", "skipped", s.n, "first", s.first, "error", s.err)
	}
}

// newest keeps the last limit entries (all when limit <= 0).
func newest(entries []*rivorav1.AuditEntry, limit int) []*rivorav1.AuditEntry {
	if limit > 0 && len(entries) > limit {
		return entries[len(entries)-limit:]
	}
	return entries
}
