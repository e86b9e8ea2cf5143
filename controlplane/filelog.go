package controlplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// changeLog is FileStore's change log: one JSON line per config version
// after the snapshot, holding only what that version changed (the
// records put, the ids deleted). A line is appended and
// fsynced before the change is answered. A torn last line (a crash while
// appending, before the change was answered) is dropped on open; any other
// damage is an error naming the file and line.
type changeLog struct {
	path string
	f    *os.File
	// size is the log's length in bytes; snapshotSize the snapshot's,
	// which decides when compacting pays.
	size, snapshotSize int64
}

// logRecord is one line of the change log.
type logRecord struct {
	Version   uint64            `json:"version"`
	Put       []json.RawMessage `json:"put,omitempty"`
	Delete    []string          `json:"delete,omitempty"`
	PutSubs   []json.RawMessage `json:"put_subscriptions,omitempty"`
	DelSubs   []string          `json:"delete_subscriptions,omitempty"`
	PutTypes  []json.RawMessage `json:"put_event_types,omitempty"`
	DelTypes  []string          `json:"delete_event_types,omitempty"`
	PutTokens []json.RawMessage `json:"put_tokens,omitempty"`
	DelTokens []string          `json:"delete_tokens,omitempty"`
	PutEdges  []json.RawMessage `json:"put_edges,omitempty"`
	DelEdges  []string          `json:"delete_edges,omitempty"`
}

// minCompactBytes keeps a small state from being compacted on every
// change.
const minCompactBytes = 1 << 20

// openChangeLog applies the log at path to st (records at or below st's
// version are already in the snapshot) and opens it for appending.
func openChangeLog(path string, st *state, snapshotSize int64) (*changeLog, error) {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	good, err := replay(path, data, st)
	if err != nil {
		return nil, err
	}
	// 0600: its records hold signing secrets and custom header values.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := f.Chmod(0o600); err != nil { // one made before it was 0600
		f.Close()
		return nil, fmt.Errorf("restrict %s to its owner: %w", path, err)
	}
	if good < int64(len(data)) {
		// Drop the torn tail, so the next record starts on a fresh line.
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, fmt.Errorf("truncate the torn end of %s: %w", path, err)
		}
	}
	return &changeLog{path: path, f: f, size: good, snapshotSize: snapshotSize}, nil
}

// replay applies data's records to st and returns how many bytes of data
// are whole records.
func replay(path string, data []byte, st *state) (int64, error) {
	var off int64
	for line := 1; len(data) > 0; line++ {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return off, nil // torn last line: never answered
		}
		var rec logRecord
		if err := json.Unmarshal(data[:i], &rec); err != nil {
			if len(bytes.TrimSpace(data[i+1:])) == 0 {
				return off, nil // a torn last line that happens to end in '\n'
			}
			return 0, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if err := applyRecord(st, &rec); err != nil {
			return 0, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		off += int64(i + 1)
		data = data[i+1:]
	}
	return off, nil
}

func applyRecord(st *state, rec *logRecord) error {
	if rec.Version <= st.version {
		return nil // in the snapshot already (a crash while compacting)
	}
	if rec.Version != st.version+1 {
		return fmt.Errorf("version %d follows version %d: a change is missing", rec.Version, st.version)
	}
	if err := replayRecords("put", rec.Put, rec.Delete, st.dests, (*rivorav1.Destination).GetId); err != nil {
		return err
	}
	if err := replayRecords("put_subscriptions", rec.PutSubs, rec.DelSubs, st.subs, (*rivorav1.Subscription).GetId); err != nil {
		return err
	}
	if err := replayRecords("put_event_types", rec.PutTypes, rec.DelTypes, st.types, (*rivorav1.EventType).GetName); err != nil {
		return err
	}
	if err := replayRecords("put_tokens", rec.PutTokens, rec.DelTokens, st.tokens, (*rivorav1.ApiToken).GetId); err != nil {
		return err
	}
	if err := replayRecords("put_edges", rec.PutEdges, rec.DelEdges, st.edges, (*rivorav1.Edge).GetName); err != nil {
		return err
	}
	st.version = rec.Version
	return nil
}

// replayRecords applies one kind's puts and deletes of a log record.
func replayRecords[M proto.Message](what string, put []json.RawMessage, del []string, into map[string]M, key func(M) string) error {
	if err := decodeRecords(what, put, into, key); err != nil {
		return err
	}
	for _, id := range del {
		delete(into, id)
	}
	return nil
}

// append durably records d, which holds only what changed.
func (l *changeLog) append(d delta) error {
	rec := logRecord{Version: d.version}
	var err error
	if rec.Put, rec.Delete, err = encodeChanges(d.dests); err != nil {
		return err
	}
	if rec.PutSubs, rec.DelSubs, err = encodeChanges(d.subs); err != nil {
		return err
	}
	if rec.PutTypes, rec.DelTypes, err = encodeChanges(d.types); err != nil {
		return err
	}
	if rec.PutTokens, rec.DelTokens, err = encodeChanges(d.tokens); err != nil {
		return err
	}
	if rec.PutEdges, rec.DelEdges, err = encodeChanges(d.edges); err != nil {
		return err
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if _, err := l.f.Write(line); err != nil {
		return l.undo(err)
	}
	if err := l.f.Sync(); err != nil {
		return l.undo(err)
	}
	l.size += int64(len(line))
	return nil
}

// undo cuts a failed append off the log, so it neither counts nor
// damages the next one.
func (l *changeLog) undo(err error) error {
	if terr := l.f.Truncate(l.size); terr != nil {
		return fmt.Errorf("save state: %w (and cutting the partial record off %s failed: %v)", err, l.path, terr)
	}
	return fmt.Errorf("save state: %w", err)
}

// due reports whether the log has outgrown the snapshot.
func (l *changeLog) due() bool { return l.size > max(l.snapshotSize, minCompactBytes) }

// reset empties the log once a snapshot holds everything in it.
func (l *changeLog) reset(snapshotSize int64) error {
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("empty %s: %w", l.path, err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("empty %s: %w", l.path, err)
	}
	l.size, l.snapshotSize = 0, snapshotSize
	return nil
}

// encodeChanges lists, sorted by id, the messages a delta puts (as
// protojson) and the ids it deletes (nil messages).
func encodeChanges[M proto.Message](changes map[string]M) (put []json.RawMessage, deleted []string, err error) {
	for _, id := range sortedKeys(changes) {
		m := changes[id]
		if m.ProtoReflect().IsValid() {
			raw, err := protojson.Marshal(m)
			if err != nil {
				return nil, nil, err
			}
			put = append(put, raw)
		} else {
			deleted = append(deleted, id)
		}
	}
	return put, deleted, nil
}
