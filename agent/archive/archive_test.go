package archive_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/agent/archive"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func letter(id string, seq uint64) *rivorav1.DeadLetter {
	return &rivorav1.DeadLetter{
		Event:      &rivorav1.Event{EventId: id, DestinationId: "orders", CustomerId: "acme", LaneKey: "u\n1", Payload: []byte{0, 1, 0xff}, Type: "t"},
		Attempts:   2,
		LastStatus: 500,
		LastError:  "HTTP 500: boom",
		DeadAt:     timestamppb.New(time.Date(2031, 2, 3, 4, 5, 6, 0, time.UTC)),
		Reason:     rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS,
		Partition:  3,
		LaneSeq:    seq,
	}
}

// decode reads an archive object: gzip, one protojson DeadLetter per line.
func decode(t *testing.T, data []byte) []*rivorav1.DeadLetter {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	var out []*rivorav1.DeadLetter
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		dl := &rivorav1.DeadLetter{}
		if err := protojson.Unmarshal(sc.Bytes(), dl); err != nil {
			t.Fatalf("line %d is not a protojson DeadLetter: %v (%q)", len(out)+1, err, sc.Bytes())
		}
		out = append(out, dl)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestKey(t *testing.T) {
	// The hour is taken in UTC whatever the zone of deadAt.
	at := time.Date(2031, 2, 3, 23, 59, 0, 0, time.FixedZone("x", -2*3600))
	got := archive.Key("orders", at, 3, 10, 12)
	if !strings.HasPrefix(got, "deadletter/orders/2031/02/04/01/") || !strings.HasSuffix(got, ".ndjson.gz") {
		t.Fatalf("Key = %q, want deadletter/orders/2031/02/04/01/….ndjson.gz", got)
	}
	if strings.Count(got, "/") != 6 {
		t.Fatalf("Key = %q: the object name must be one path element", got)
	}
	// Distinct ranges get distinct names; sorted names are in lane order.
	keys := []string{
		archive.Key("orders", at, 3, 9, 9),
		archive.Key("orders", at, 3, 10, 12),
		archive.Key("orders", at, 3, 100, 100),
		archive.Key("orders", at, 3, 1000, 2000),
	}
	if !slices.IsSorted(keys) {
		t.Fatalf("keys in lane order do not sort in lane order: %q", keys)
	}
	if len(slices.Compact(slices.Clone(keys))) != len(keys) {
		t.Fatalf("distinct ranges share a key: %q", keys)
	}
}

func TestDirPutRoundTrip(t *testing.T) {
	root := t.TempDir()
	d, err := archive.NewDir(filepath.Join(root, "nested", "archive"))
	if err != nil {
		t.Fatal(err)
	}
	in := []*rivorav1.DeadLetter{letter("e1", 10), letter("e2", 12)}
	key := archive.Key("orders", in[0].GetDeadAt().AsTime(), 3, 10, 12)
	if _, err := d.Put(context.Background(), key, in); err != nil {
		t.Fatalf("Put: %v", err)
	}
	path := filepath.Join(root, "nested", "archive", filepath.FromSlash(key))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("object not at %s: %v", path, err)
	}
	out := decode(t, data)
	if len(out) != len(in) {
		t.Fatalf("object holds %d dead letters, want %d", len(out), len(in))
	}
	for i := range in {
		if !proto.Equal(out[i], in[i]) {
			t.Fatalf("dead letter %d\n got %v\nwant %v", i, out[i], in[i])
		}
	}

	// Putting the same dead letters again (a retry) writes nothing, and
	// leaves no temp files behind.
	if written, err := d.Put(context.Background(), key, in); err != nil || written != key {
		t.Fatalf("Put again = %q, %v; want %q, nil", written, err, key)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("object directory holds %v, want only the object", names)
	}
}

func TestDirPutFailsWhenUnwritable(t *testing.T) {
	root := t.TempDir()
	d, err := archive.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	// A file where the object's directory must go: the write fails (even
	// for root), with the key in the error.
	if err := os.WriteFile(filepath.Join(root, "deadletter"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	key := archive.Key("orders", time.Now(), 0, 1, 1)
	_, err = d.Put(context.Background(), key, []*rivorav1.DeadLetter{letter("e1", 1)})
	if err == nil {
		t.Fatal("Put succeeded with no place to write")
	}
	if !strings.Contains(err.Error(), key) {
		t.Fatalf("error %q does not name the key", err)
	}
}

func TestEncodeEmpty(t *testing.T) {
	data, err := archive.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if out := decode(t, data); len(out) != 0 {
		t.Fatalf("Encode(nil) decodes to %d letters", len(out))
	}
}

func TestDirListAndGet(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d, err := archive.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2031, 2, 3, 4, 0, 0, 0, time.UTC)
	put := func(dest string, first, last uint64) string {
		t.Helper()
		key := archive.Key(dest, at, 1, first, last)
		var dls []*rivorav1.DeadLetter
		for seq := first; seq <= last; seq++ {
			dl := letter(fmt.Sprintf("%s-%d", dest, seq), seq)
			dl.Event.DestinationId = dest
			dls = append(dls, dl)
		}
		if _, err := d.Put(ctx, key, dls); err != nil {
			t.Fatal(err)
		}
		return key
	}
	o2 := put("orders", 100, 101)
	o1 := put("orders", 7, 9)
	put("orders-eu", 1, 1) // shares a prefix with "orders" as a string, not as a destination
	b1 := put("billing", 3, 3)
	// A write in progress is not an object.
	if err := os.WriteFile(filepath.Join(filepath.Dir(filepath.Join(root, filepath.FromSlash(o1))), ".put-123"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}

	keys, err := d.List(ctx, archive.DestinationPrefix("orders"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{o1, o2}) {
		t.Fatalf("List(orders) = %q, want %q (sorted, in lane order, not orders-eu's)", keys, []string{o1, o2})
	}
	all, err := d.List(ctx, archive.Prefix)
	if err != nil || len(all) != 4 || !slices.IsSorted(all) || !slices.Contains(all, b1) {
		t.Fatalf("List(all) = %q, %v; want 4 sorted keys", all, err)
	}
	partial, err := d.List(ctx, "deadletter/bill")
	if err != nil || !slices.Equal(partial, []string{b1}) {
		t.Fatalf("List(deadletter/bill) = %q, %v; want %q", partial, err, b1)
	}
	none, err := d.List(ctx, archive.DestinationPrefix("nobody"))
	if err != nil || len(none) != 0 {
		t.Fatalf("List(unknown destination) = %q, %v; want nothing and no error", none, err)
	}

	got, err := d.Get(ctx, o1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].GetEvent().GetEventId() != "orders-7" || got[2].GetLaneSeq() != 9 {
		t.Fatalf("Get(%s) = %v", o1, got)
	}
	if _, err := d.Get(ctx, archive.Key("orders", at, 1, 5, 5)); err == nil {
		t.Fatal("Get of a missing object succeeded")
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	good, err := archive.Encode([]*rivorav1.DeadLetter{letter("e1", 1), letter("e2", 2)})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := archive.Decode(good); err != nil || len(out) != 2 {
		t.Fatalf("Decode(Encode(2 letters)) = %d, %v", len(out), err)
	}
	if _, err := archive.Decode([]byte("plain text")); err == nil {
		t.Fatal("Decode accepted data that is not gzip")
	}
	gz := func(s string) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write([]byte(s))
		zw.Close()
		return buf.Bytes()
	}
	line, _ := protojson.Marshal(letter("e1", 1))
	if _, err := archive.Decode(gz(string(line) + "\n{not json}\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("Decode of a bad second line: %v, want an error naming line 2", err)
	}
	if _, err := archive.Decode(gz(`{"attempts":2}` + "\n")); err == nil || !strings.Contains(err.Error(), "event id") {
		t.Fatalf("Decode of a letter without an event: %v, want an error about the event id", err)
	}
	// Truncated objects (a crashed writer elsewhere) are errors, not short reads.
	if _, err := archive.Decode(good[:len(good)/2]); err == nil {
		t.Fatal("Decode accepted a truncated object")
	}
}

// The directory archive never reads, lists or writes outside its root,
// and its errors name the key, not where the archive lives on disk.
func TestDirStaysInsideItsRoot(t *testing.T) {
	root := t.TempDir()
	d, err := archive.NewDir(filepath.Join(root, "archive"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"../x", "deadletter/../../x", "/etc/passwd", "deadletter//x", "deadletter/./x", "", "..\\x"} {
		if _, err := d.Get(ctx, key); err == nil || strings.Contains(err.Error(), root) {
			t.Errorf("Get(%q) = %v, want an error without the root path", key, err)
		}
		if _, err := d.List(ctx, key); err == nil || strings.Contains(err.Error(), root) {
			t.Errorf("List(%q) = %v, want an error without the root path", key, err)
		}
		if _, err := d.Put(ctx, key, nil); err == nil || strings.Contains(err.Error(), root) {
			t.Errorf("Put(%q) = %v, want an error without the root path", key, err)
		}
	}
	_, err = d.Get(ctx, "deadletter/orders/missing.ndjson.gz")
	if err == nil || strings.Contains(err.Error(), root) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Get of a missing object = %v, want a not-exist error without the root path", err)
	}
}
