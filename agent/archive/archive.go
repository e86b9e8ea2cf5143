// Package archive is tier 3: dead letters (events whose attempts or window
// ran out) stored as gzip-compressed NDJSON objects, one protojson
// rivora.v1.DeadLetter per line, under
// deadletter/<destination>/<yyyy>/<mm>/<dd>/<hh>/<partition>-<first>-<last>.ndjson.gz.
// Object names are deterministic, so a retried write replaces rather than
// duplicates.
package archive

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Archive stores objects of dead letters. S3/MinIO and a local directory
// implement it.
type Archive interface {
	// Put stores one object; putting the same key again replaces it.
	Put(ctx context.Context, key string, records []*rivorav1.DeadLetter) error
}

// Key names the object holding dead letters of one destination that died
// in the hour of deadAt, from partition p's lane-store sequences first..last.
func Key(destination string, deadAt time.Time, partition int, first, last uint64) string {
	t := deadAt.UTC()
	return fmt.Sprintf("deadletter/%s/%04d/%02d/%02d/%02d/%d-%d-%d.ndjson.gz",
		destination, t.Year(), t.Month(), t.Day(), t.Hour(), partition, first, last)
}

// Encode renders records as gzip-compressed NDJSON.
func Encode(records []*rivorav1.DeadLetter) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	for _, r := range records {
		line, err := protojson.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode dead letter %s: %w", r.GetEvent().GetEventId(), err)
		}
		zw.Write(line)
		zw.Write([]byte{'\n'})
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Dir is an archive in a local directory (what `rivora dev` uses).
type Dir struct {
	root string
}

// NewDir returns an archive rooted at dir, creating it if needed.
func NewDir(dir string) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("archive dir %s: %w", dir, err)
	}
	return &Dir{root: dir}, nil
}

// Put writes the object atomically (temp file, fsync, rename).
func (d *Dir) Put(ctx context.Context, key string, records []*rivorav1.DeadLetter) error {
	data, err := Encode(records)
	if err != nil {
		return err
	}
	path := filepath.Join(d.root, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("archive %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".put-*")
	if err != nil {
		return fmt.Errorf("archive %s: %w", key, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("archive %s: %w", key, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("archive %s: %w", key, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("archive %s: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("archive %s: %w", key, err)
	}
	return nil
}
