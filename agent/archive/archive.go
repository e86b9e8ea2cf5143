// Package archive is tier 3: dead letters (events whose attempts or window
// ran out) stored as gzip-compressed NDJSON objects, one protojson
// rivora.v1.DeadLetter per line, under
// deadletter/<destination>/<yyyy>/<mm>/<dd>/<hh>/<partition>-<first>-<last>.ndjson.gz
// (first and last are ledger sequences).
//
// An object is never replaced. Ledger sequences start again at 1 in a fresh
// data directory (a rebuilt node, a reset `rivora dev`, a second cell on the
// same bucket), so two writers may name different dead letters alike: the
// later one is stored under the first free variant of the name,
// <partition>-<first>-<last>_002.ndjson.gz, _003, … _008 (VariantKey), which
// sorts right after it, and past those under a name of its own (ownKey).
// A write of the same dead letters again (a retry, or a new owner repeating a
// write its predecessor made before it could purge the ledger) finds them
// stored and writes nothing.
//
// So a new incarnation's objects of an hour sort among the old one's, not
// after them: a replay spanning both may send a lane's later deaths first.
// And two installations sharing a bucket list (and replay, each with its
// own marks) each other's dead letters: one bucket per installation.
package archive

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rivora/rivora/internal/durable"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Archive stores objects of dead letters. S3/MinIO and a local directory
// implement it.
type Archive interface {
	// Put stores records as a new object named key, or, when key holds
	// other dead letters, as the first of key's variants (VariantKey) that
	// is free or holds these; it never replaces an object. It returns the
	// key the records are stored under. When that key already held the
	// same dead letters (SameDeadLetters: a retried write), nothing is
	// written.
	Put(ctx context.Context, key string, records []*rivorav1.DeadLetter) (string, error)
	// List returns the keys of the objects under prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Get reads one object.
	Get(ctx context.Context, key string) ([]*rivorav1.DeadLetter, error)
	// Check reports whether the archive can be reached and written to,
	// without writing an object (an agent's startup check).
	Check(ctx context.Context) error
}

// Prefix is where all dead letters live; DestinationPrefix narrows to one
// destination.
const Prefix = "deadletter/"

// DestinationPrefix is the key prefix of one destination's objects.
func DestinationPrefix(destination string) string { return Prefix + destination + "/" }

// HourLayout is the time layout of the hour folders under a
// destination's prefix (<yyyy>/<mm>/<dd>/<hh>, UTC).
const HourLayout = "2006/01/02/15"

// HourPrefix is the key prefix of one destination's objects for the hour
// of t.
func HourPrefix(destination string, t time.Time) string {
	return DestinationPrefix(destination) + t.UTC().Format(HourLayout) + "/"
}

// Key names the object holding dead letters of one destination that died
// in the hour of deadAt, recorded in partition p's ledger at sequences
// first..last. Keys of one destination sort in the order its dead letters
// were recorded, which is lane order.
func Key(destination string, deadAt time.Time, partition int, first, last uint64) string {
	// Zero-padded so that sorting keys sorts objects in lane order.
	return fmt.Sprintf("%s%03d-%020d-%020d.ndjson.gz", HourPrefix(destination, deadAt), partition, first, last)
}

// maxVariants bounds the numbered names Put tries for one object: past
// them it writes under a name of its own (ownKey). Many writers naming
// other dead letters alike is rare; a bound keeps one that fails from
// making a request per variant, and a name of its own keeps archiving
// going.
const maxVariants = 8

// objectExt ends every object's name.
const objectExt = ".ndjson.gz"

// VariantKey is the n-th name for the object named key (n ≥ 2; 1 is key
// itself): "_002" … "_008" (maxVariants) before the extension. '_' sorts after '.', and
// the width is fixed, so key's variants sort right after it, in the order
// they were written, and before any later key of the destination.
func VariantKey(key string, n int) string {
	if n <= 1 {
		return key
	}
	const ext = ".ndjson.gz"
	return fmt.Sprintf("%s_%03d%s", strings.TrimSuffix(key, ext), n, ext)
}

// SameDeadLetters reports whether a and b are the same dead letters in the
// same order: the same events, dead at the same times. An object holding
// b is then a write of a again (a retry, or a new owner repeating it), not
// another writer's.
func SameDeadLetters(a, b []*rivorav1.DeadLetter) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].GetEvent().GetEventId() != b[i].GetEvent().GetEventId() ||
			!a[i].GetDeadAt().AsTime().Equal(b[i].GetDeadAt().AsTime()) ||
			a[i].GetReason() != b[i].GetReason() {
			return false
		}
	}
	return true
}

// objectStore is what putNew needs of an archive: create an object only
// if its key is free (created false, no error, when it is taken) and read
// one.
type objectStore interface {
	create(ctx context.Context, key string, data []byte) (created bool, err error)
	read(ctx context.Context, key string) ([]byte, error)
}

// putNew is Put for both archives: key, or its first variant that is free
// or already holds records. An object that cannot be decoded is another
// writer's too.
func putNew(ctx context.Context, store objectStore, key string, records []*rivorav1.DeadLetter) (string, error) {
	data, err := Encode(records)
	if err != nil {
		return "", err
	}
	for n := 1; n <= maxVariants; n++ {
		k := VariantKey(key, n)
		switch ours, err := createOrFind(ctx, store, k, data, records); {
		case err != nil:
			return "", err
		case ours:
			return k, nil
		}
	}
	// Every numbered variant holds other dead letters: a name of these
	// dead letters' own, so that a retry of this write (its answer lost)
	// finds its object rather than writing another copy.
	k := ownKey(key, records)
	switch ours, err := createOrFind(ctx, store, k, data, records); {
	case err != nil:
		return "", err
	case ours:
		return k, nil
	}
	// Taken by others (a hash collision), or by an object this agent
	// cannot read back (a newer agent's, say): a random name, so that
	// archiving goes on. A retry of that write makes a copy, which dlq
	// and replay count as one death.
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("archive %s: %w", key, err)
	}
	k = fmt.Sprintf("%s_r%s%s", strings.TrimSuffix(key, objectExt), hex.EncodeToString(b[:]), objectExt)
	if _, err := store.create(ctx, k, data); err != nil {
		return "", err
	}
	return k, nil
}

// createOrFind stores data (records, encoded) under k when k is free, or
// finds k already holding records (a retried write, nothing written):
// either way the records are stored under k (ours). Not ours: k holds
// other dead letters, or an object that cannot be decoded.
func createOrFind(ctx context.Context, store objectStore, k string, data []byte, records []*rivorav1.DeadLetter) (ours bool, err error) {
	created, err := store.create(ctx, k, data)
	if err != nil || created {
		return created, err
	}
	held, err := store.read(ctx, k)
	if err != nil {
		return false, err
	}
	dls, err := Decode(held)
	return err == nil && SameDeadLetters(dls, records), nil
}

// ownKey is a name for the object named key that only these dead
// letters take: "_r" and 16 hex digits of a hash of what SameDeadLetters
// compares (each one's event id, death time and reason, in order) before
// the extension. 'r' sorts after the digits, so it sorts after key's
// numbered variants, and before any later key of the destination.
func ownKey(key string, records []*rivorav1.DeadLetter) string {
	h := sha256.New()
	for _, r := range records {
		fmt.Fprintf(h, "%s\x00%d\x00%s\n", r.GetEvent().GetEventId(), r.GetDeadAt().AsTime().UnixNano(), r.GetReason())
	}
	return fmt.Sprintf("%s_r%s%s", strings.TrimSuffix(key, objectExt), hex.EncodeToString(h.Sum(nil)[:8]), objectExt)
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

// Decode parses an object written by Encode. Each line must be a
// DeadLetter with an event id; errors name the line.
func Decode(data []byte) ([]*rivorav1.DeadLetter, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("not a gzip object: %w", err)
	}
	defer zr.Close()
	sc := bufio.NewScanner(io.LimitReader(zr, 1<<30))
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	var out []*rivorav1.DeadLetter
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		dl := &rivorav1.DeadLetter{}
		if err := protojson.Unmarshal(line, dl); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if dl.GetEvent().GetEventId() == "" {
			return nil, fmt.Errorf("line %d: dead letter without an event id", n)
		}
		out = append(out, dl)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read object: %w", err)
	}
	return out, nil
}

// Dir is an archive in a local directory (what `rivora dev` uses).
type Dir struct {
	root string
	// link is os.Link; a test stands in a file system without hard
	// links.
	link func(oldname, newname string) error
}

// NewDir returns an archive rooted at dir, creating it if needed.
func NewDir(dir string) (*Dir, error) {
	root := filepath.Clean(dir)
	// The nearest directory that exists gets root's new entry.
	found := root
	for {
		if _, err := os.Stat(found); !errors.Is(err, fs.ErrNotExist) || filepath.Dir(found) == found {
			break
		}
		found = filepath.Dir(found)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("archive dir %s: %w", dir, err)
	}
	if err := syncDirs(root, found); err != nil {
		return nil, fmt.Errorf("archive dir %s: %w", dir, err)
	}
	return &Dir{root: root, link: os.Link}, nil
}

// Put writes the object atomically and never over another (see putNew).
func (d *Dir) Put(ctx context.Context, key string, records []*rivorav1.DeadLetter) (string, error) {
	if _, err := d.path(key); err != nil {
		return "", err
	}
	return putNew(ctx, d, key, records)
}

// create writes a temp file, syncs it and gives it the object's name
// only if that is free (name), so that an object appears whole or not
// at all and never replaces another. Then it syncs the directories:
// once Put returns, the dead letters are purged from the ledger, so the
// name must survive a power loss.
func (d *Dir) create(ctx context.Context, key string, data []byte) (bool, error) {
	path, err := d.path(key)
	if err != nil {
		return false, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, pathless("archive "+key, err)
	}
	tmp, err := writeTemp(dir, data)
	if err != nil {
		return false, pathless("archive "+key, err)
	}
	defer os.Remove(tmp)
	created, err := d.name(tmp, path)
	if err != nil {
		return false, pathless("archive "+key, err)
	}
	if !created {
		// Taken: perhaps by this write's own earlier attempt, which named
		// it and then failed (or died) before its sync; putNew may take
		// the object for ours, and the ledger is purged after: sync.
		if err := syncDirs(dir, d.root); err != nil {
			return false, pathless("archive "+key, err)
		}
		return false, nil
	}
	// Removed before the sync, so that a crash does not bring the temp
	// name back.
	os.Remove(tmp)
	// Every directory up to the root: MkdirAll may have created any of
	// them, here or in a concurrent create that has not synced yet (a
	// destination's partitions share its hour directories).
	if err := syncDirs(dir, d.root); err != nil {
		return false, pathless("archive "+key, err)
	}
	return true, nil
}

// writeTemp writes data to a new temp file in dir (a name List skips)
// and syncs it.
func writeTemp(dir string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, ".put-*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// name gives the whole file tmp the name path, only if path is free
// (false when it is taken). A hard link does it in one step. Without
// hard links (Linux answers EPERM on vfat and exfat, EOPNOTSUPP or
// ENOSYS on CIFS and FUSE, EXDEV on union file systems), an empty file
// created only if path is free claims the name, and tmp is renamed over
// that claim: a reader sees no object or a whole one. A crash between
// the two leaves the claim, an empty file, never an object (Encode
// writes a gzip header even for no dead letters): List skips it, and
// putNew takes it for another writer's, so the write that was cut short
// goes to a variant when it is retried. The claim is atomic only where
// O_EXCL is, which some network and FUSE file systems do not promise
// across their clients: there, keep one writer per archive directory.
func (d *Dir) name(tmp, path string) (bool, error) {
	err := d.link(tmp, path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrExist):
		return false, nil
	case !noHardLinks(err):
		return false, err
	}
	claim, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	claim.Close()
	if err := os.Rename(tmp, path); err != nil {
		// The claim is this create's: free the name for a retry.
		os.Remove(path)
		return false, err
	}
	return true, nil
}

// noHardLinks reports whether a link failed because the file system
// has no hard links, rather than because the name is taken or the
// directory cannot be written.
func noHardLinks(err error) bool {
	return errors.Is(err, errors.ErrUnsupported) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EXDEV)
}

// syncDirs syncs dir and each directory above it up to top: the entries
// they hold (an object's name, a new directory's) survive a crash.
func syncDirs(dir, top string) error {
	for {
		if err := durable.SyncDir(dir); err != nil {
			return err
		}
		if dir == top || filepath.Dir(dir) == dir {
			return nil
		}
		dir = filepath.Dir(dir)
	}
}

func (d *Dir) read(ctx context.Context, key string) ([]byte, error) {
	path, err := d.path(key)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, pathless("archive "+key, err)
	}
	return data, nil
}

// Check reports whether the directory can be written to: a file created
// and removed under a name List skips.
func (d *Dir) Check(ctx context.Context) error {
	f, err := os.CreateTemp(d.root, ".put-check-*")
	if err != nil {
		return pathless("archive directory", err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return pathless("archive directory", err)
	}
	return nil
}

// List walks the directory under prefix.
func (d *Dir) List(ctx context.Context, prefix string) ([]string, error) {
	root, err := d.path(prefix)
	if err != nil {
		return nil, err
	}
	// prefix may end inside a name ("deadletter/ord"): walk its directory.
	walkRoot := root
	if !strings.HasSuffix(prefix, "/") {
		walkRoot = filepath.Dir(root)
	}
	var keys []string
	err = filepath.WalkDir(walkRoot, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".put-") {
			return nil
		}
		// An empty file is a name claimed by a create that has not
		// finished, or that a crash cut short (Dir.name): no object.
		switch info, err := e.Info(); {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return err
		case info.Size() == 0:
			return nil
		}
		rel, err := filepath.Rel(d.root, path)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return ctx.Err()
	})
	if err != nil {
		return nil, pathless("list archive "+prefix, err)
	}
	sort.Strings(keys)
	return keys, nil
}

// Get reads one object.
func (d *Dir) Get(ctx context.Context, key string) ([]*rivorav1.DeadLetter, error) {
	data, err := d.read(ctx, key)
	if err != nil {
		return nil, err
	}
	out, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", key, err)
	}
	return out, nil
}

// path is where key (or a prefix) lives under the root. A key that is not
// a plain relative path ("..", "/x", "a//b") is refused: nothing outside
// the root is ever read, listed or written.
func (d *Dir) path(key string) (string, error) {
	if rel := strings.TrimSuffix(key, "/"); !fs.ValidPath(rel) || strings.Contains(rel, "\\") {
		return "", fmt.Errorf("archive key %q is not a plain relative path", key)
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// pathless is err under what, without the file system path an *fs.PathError
// carries: answers name the key, never where the archive lives on disk.
func pathless(what string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %s: %w", what, pe.Op, pe.Err)
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return fmt.Errorf("%s: %s: %w", what, le.Op, le.Err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
