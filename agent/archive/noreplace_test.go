package archive_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/rivora/rivora/agent/archive"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/ports"
)

// minioServer is a real MinIO server for the S3 archive's tests.
type minioServer struct {
	addr, user, secret string
}

// startMinIO starts MinIO (`minio` on PATH or in $(go env GOPATH)/bin;
// a missing binary fails the test) with its data in a temp directory, and
// waits until it serves S3 calls.
func startMinIO(t *testing.T) *minioServer {
	t.Helper()
	bin, err := exec.LookPath("minio")
	if err != nil {
		out, err := exec.Command("go", "env", "GOPATH").Output()
		if err != nil {
			t.Fatalf("go env GOPATH: %v", err)
		}
		bin = filepath.Join(strings.Split(strings.TrimSpace(string(out)), string(os.PathListSeparator))[0], "bin", "minio")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("MinIO server binary (see e2e/minio_test.go to install it): %v", err)
	}
	port, err := ports.Free()
	if err != nil {
		t.Fatal(err)
	}
	consolePort, err := ports.Free()
	if err != nil {
		t.Fatal(err)
	}
	m := &minioServer{addr: "127.0.0.1:" + strconv.Itoa(port), user: "rivora-test", secret: "rivora-test-secret"}
	cmd := exec.Command(bin, "server", t.TempDir(), "--address", m.addr, "--console-address", "127.0.0.1:"+strconv.Itoa(consolePort), "--certs-dir", t.TempDir(), "--quiet")
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+m.user, "MINIO_ROOT_PASSWORD="+m.secret, "MINIO_UPDATE=off", "MINIO_BROWSER=off")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	client := m.client(t)
	poll.True(t, "MinIO to serve S3 calls", 90*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := client.ListBuckets(ctx)
		return err == nil
	})
	return m
}

func (m *minioServer) client(t *testing.T) *minio.Client {
	c, err := minio.New(m.addr, &minio.Options{Creds: credentials.NewStaticV4(m.user, m.secret, ""), Secure: false})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (m *minioServer) archive(t *testing.T, bucket string) *archive.S3 {
	s, err := archive.NewS3(archive.S3Config{Endpoint: m.addr, Bucket: bucket, AccessKey: m.user, SecretKey: m.secret, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ids(dls []*rivorav1.DeadLetter) string {
	var out []string
	for _, dl := range dls {
		out = append(out, dl.GetEvent().GetEventId())
	}
	return strings.Join(out, ",")
}

// checkNeverReplaces is the s22 case on any archive: a second writer
// (a fresh data directory: ledger sequences from 1 again) names other dead
// letters alike. Both objects are kept, listed in the order written, and a
// write of the same dead letters again makes no new object.
func checkNeverReplaces(t *testing.T, a archive.Archive) {
	ctx := context.Background()
	first := []*rivorav1.DeadLetter{letter("a1", 1), letter("a2", 2)}
	second := []*rivorav1.DeadLetter{letter("b1", 1), letter("b2", 2)}
	third := []*rivorav1.DeadLetter{letter("c1", 1), letter("c2", 2)}
	key := archive.Key("orders", first[0].GetDeadAt().AsTime(), 3, 1, 2)
	later := archive.Key("orders", first[0].GetDeadAt().AsTime(), 3, 3, 3)
	put := func(key string, dls []*rivorav1.DeadLetter, want string) {
		t.Helper()
		written, err := a.Put(ctx, key, dls)
		if err != nil || written != want {
			t.Fatalf("Put(%s) of %s = %q, %v; want %q", key, ids(dls), written, err, want)
		}
	}
	put(key, first, key)
	put(later, []*rivorav1.DeadLetter{letter("a3", 3)}, later)
	put(key, second, archive.VariantKey(key, 2))
	put(key, first, key)                         // a retry of the first write
	put(key, second, archive.VariantKey(key, 2)) // a retry of the second
	put(key, third, archive.VariantKey(key, 3))

	keys, err := a.List(ctx, archive.DestinationPrefix("orders"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{key, archive.VariantKey(key, 2), archive.VariantKey(key, 3), later}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("List = %q\nwant %q (each name's variants right after it, in the order written)", keys, want)
	}
	for i, dls := range [][]*rivorav1.DeadLetter{first, second, third} {
		got, err := a.Get(ctx, want[i])
		if err != nil {
			t.Fatal(err)
		}
		if ids(got) != ids(dls) {
			t.Fatalf("Get(%s) = %s, want %s", want[i], ids(got), ids(dls))
		}
	}
}

func TestDirNeverReplacesAnObject(t *testing.T) {
	d, err := archive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	checkNeverReplaces(t, d)
}

func TestS3NeverReplacesAnObject(t *testing.T) {
	m := startMinIO(t)
	checkNeverReplaces(t, m.archive(t, "dead-letters"))
}

// Two archives on one bucket writing one free key at once (two
// incarnations, or an old owner and a new): the conditional PUT lets one
// create it; the other's dead letters go to a variant. Neither is lost.
func TestS3RacingWritersKeepBoth(t *testing.T) {
	m := startMinIO(t)
	a, b := m.archive(t, "dead-letters"), m.archive(t, "dead-letters")
	if err := a.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The server honours If-None-Match: * (what closes the race between
	// the Stat and the PUT).
	c := m.client(t)
	opts := minio.PutObjectOptions{}
	opts.SetMatchETagExcept("*")
	for i, want := range []string{"", minio.PreconditionFailed} {
		_, err := c.PutObject(context.Background(), "dead-letters", "probe", strings.NewReader("x"), 1, opts)
		if got := minio.ToErrorResponse(err).Code; got != want {
			t.Fatalf("conditional PUT %d: code %q (%v), want %q", i+1, got, err, want)
		}
	}
	for round := uint64(1); round <= 10; round++ {
		key := archive.Key("orders", time.Now(), 0, round, round)
		type result struct {
			key string
			err error
		}
		results := make(chan result, 2)
		for i, arch := range []*archive.S3{a, b} {
			dls := []*rivorav1.DeadLetter{letter("w"+strconv.Itoa(i)+"-"+strconv.FormatUint(round, 10), round)}
			go func() {
				k, err := arch.Put(context.Background(), key, dls)
				results <- result{k, err}
			}()
		}
		r1, r2 := <-results, <-results
		if r1.err != nil || r2.err != nil {
			t.Fatalf("round %d: %v, %v", round, r1.err, r2.err)
		}
		if r1.key == r2.key {
			t.Fatalf("round %d: both writers' dead letters stored under %s", round, r1.key)
		}
		keys, err := a.List(context.Background(), archive.HourPrefix("orders", time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{r1.key, r2.key} {
			if dls, err := a.Get(context.Background(), k); err != nil || len(dls) != 1 {
				t.Fatalf("round %d: object %s: %d dead letters, %v (keys %q)", round, k, len(dls), err, keys)
			}
		}
	}
}

// A bucket removed while the archive is in use is created again by the
// next Put, which succeeds; List and Get find it again too.
func TestS3RecreatesARemovedBucket(t *testing.T) {
	m := startMinIO(t)
	ctx := context.Background()
	a := m.archive(t, "dead-letters")
	key := archive.Key("orders", time.Now(), 0, 1, 1)
	if _, err := a.Put(ctx, key, []*rivorav1.DeadLetter{letter("e1", 1)}); err != nil {
		t.Fatal(err)
	}
	c := m.client(t)
	if err := c.RemoveBucketWithOptions(ctx, "dead-letters", minio.RemoveBucketOptions{ForceDelete: true}); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.BucketExists(ctx, "dead-letters"); err != nil || ok {
		t.Fatalf("bucket still exists after its removal: %v, %v", ok, err)
	}
	key2 := archive.Key("orders", time.Now(), 0, 2, 2)
	if written, err := a.Put(ctx, key2, []*rivorav1.DeadLetter{letter("e2", 2)}); err != nil || written != key2 {
		t.Fatalf("Put after the bucket was removed = %q, %v; want %q stored in a new bucket", written, err, key2)
	}
	keys, err := a.List(ctx, archive.Prefix)
	if err != nil || len(keys) != 1 || keys[0] != key2 {
		t.Fatalf("List = %q, %v; want only %s", keys, err, key2)
	}

	// Removed again: the first List finds the bucket created again
	// (empty), not a refused access.
	if err := c.RemoveBucketWithOptions(ctx, "dead-letters", minio.RemoveBucketOptions{ForceDelete: true}); err != nil {
		t.Fatal(err)
	}
	if keys, err := a.List(ctx, archive.Prefix); err != nil || len(keys) != 0 {
		t.Fatalf("List after a second removal = %q, %v; want an empty bucket created again", keys, err)
	}
	// And again: a Get of an object that was in it says it is not
	// there, not that access is refused (check --s3-*).
	if _, err := a.Put(ctx, key, []*rivorav1.DeadLetter{letter("e3", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveBucketWithOptions(ctx, "dead-letters", minio.RemoveBucketOptions{ForceDelete: true}); err != nil {
		t.Fatal(err)
	}
	_, err = a.Get(ctx, key)
	if code, refused := archive.Refused(err); err == nil || refused {
		t.Fatalf("Get after a third removal: %v (code %q); want the object missing, not a refused access", err, code)
	}
	if ok, err := c.BucketExists(ctx, "dead-letters"); err != nil || !ok {
		t.Errorf("bucket not created again by Get: %v, %v", ok, err)
	}
}

// Once a name and all its numbered variants hold other dead letters, Put
// still stores the next ones, under a name of their own that sorts after
// the variants and before the destination's later objects: archiving of
// the partition goes on.
func TestDirPutPastTheVariantsUsesANameOfItsOwn(t *testing.T) {
	a, err := archive.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := letter("x", 1).GetDeadAt().AsTime()
	key := archive.Key("orders", at, 3, 1, 1)
	later := archive.Key("orders", at, 3, 2, 2)
	if _, err := a.Put(ctx, later, []*rivorav1.DeadLetter{letter("later", 2)}); err != nil {
		t.Fatal(err)
	}
	var numbered []string
	for n := 1; ; n++ {
		written, err := a.Put(ctx, key, []*rivorav1.DeadLetter{letter(fmt.Sprintf("w%d", n), 1)})
		if err != nil {
			t.Fatalf("write %d: %v", n, err)
		}
		if written != archive.VariantKey(key, n) {
			if n < 3 {
				t.Fatalf("write %d stored under %s, want %s", n, written, archive.VariantKey(key, n))
			}
			numbered = append(numbered, written)
			break
		}
		numbered = append(numbered, written)
	}
	own := numbered[len(numbered)-1]
	if !regexp.MustCompile(`_r[0-9a-f]{16}\.ndjson\.gz$`).MatchString(own) || !strings.HasPrefix(own, strings.TrimSuffix(key, ".ndjson.gz")+"_") {
		t.Fatalf("past the variants stored under %s; want %s's name with _r and 16 hex digits", own, key)
	}
	// A retry of that write (its answer lost) finds its object: no copy.
	if again, err := a.Put(ctx, key, []*rivorav1.DeadLetter{letter(fmt.Sprintf("w%d", len(numbered)), 1)}); err != nil || again != own {
		t.Fatalf("the same write again = %s, %v; want %s, its own name", again, err, own)
	}
	// Two more, each under a name of its own, none lost.
	for _, id := range []string{"y1", "y2"} {
		written, err := a.Put(ctx, key, []*rivorav1.DeadLetter{letter(id, 1)})
		if err != nil || written == own || !strings.Contains(written, "_r") {
			t.Fatalf("write %s: %s, %v; want another name of its own", id, written, err)
		}
		got, err := a.Get(ctx, written)
		if err != nil || ids(got) != id {
			t.Fatalf("Get(%s) = %s, %v; want %s", written, ids(got), err, id)
		}
	}
	keys, err := a.List(ctx, archive.DestinationPrefix("orders"))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(numbered)+3 || keys[len(keys)-1] != later {
		t.Fatalf("List = %q; want every object, %s last", keys, later)
	}
	for i, k := range numbered[:len(numbered)-1] {
		if keys[i] != k {
			t.Errorf("List[%d] = %s, want %s (numbered variants first, in order)", i, keys[i], k)
		}
	}
}
