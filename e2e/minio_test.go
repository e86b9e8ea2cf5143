package e2e

// A real MinIO server for the archive tests (tier 3 on S3). The server is a
// Go module built as a tool outside the project (it is large and AGPL: never
// imported); see shared/infra/README.md.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/rivora/rivora/e2e/process"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/syncbuf"
)

// minioModule is the MinIO server version installed when `minio` is missing.
const minioModule = "github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"

// minioInstallTimeout bounds a cold build (10–20 min on 2 cores).
const minioInstallTimeout = 45 * time.Minute

var (
	minioOnce    sync.Once
	minioPath    string
	minioFindErr error
)

// minioBinary returns the path of a MinIO server binary: `minio` on PATH,
// else $(go env GOPATH)/bin/minio, else it installs it there (once per test
// binary; concurrent callers wait). A failed install fails the test with
// the build output.
func minioBinary(t testing.TB) string {
	t.Helper()
	minioOnce.Do(func() { minioPath, minioFindErr = findOrInstallMinIO(t) })
	if minioFindErr != nil {
		t.Fatalf("MinIO server binary: %v", minioFindErr)
	}
	return minioPath
}

func findOrInstallMinIO(t testing.TB) (string, error) {
	if p, err := exec.LookPath("minio"); err == nil {
		return p, nil
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOPATH: %w", err)
	}
	gopath := strings.TrimSpace(string(out))
	if i := strings.IndexByte(gopath, os.PathListSeparator); i >= 0 {
		gopath = gopath[:i] // go install puts tools in the first entry
	}
	if gopath == "" {
		return "", errors.New("go env GOPATH is empty")
	}
	gobin := filepath.Join(gopath, "bin")
	bin := filepath.Join(gobin, "minio")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return bin, nil
	}
	return bin, installMinIO(t, gobin, bin)
}

// installMinIO runs `go install` of the MinIO server into gobin, from a
// temporary directory outside the repository so that the project's go.mod
// plays no part.
func installMinIO(t testing.TB, gobin, bin string) error {
	timeout := minioInstallTimeout
	if dl, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := dl.Deadline(); ok {
			// Leave time to report before `go test -timeout` panics.
			if left := time.Until(end) - time.Minute; left < timeout {
				timeout = max(left, time.Minute)
			}
		}
	}
	work, err := os.MkdirTemp("", "rivora-minio-install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	t.Logf("minio not found on PATH nor in %s: installing %s (a cold build takes 5–20 min on 2 cores; allowing %s)", gobin, minioModule, timeout.Round(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", minioModule)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=-mod=mod", "GOWORK=off")
	cmd.WaitDelay = 10 * time.Second
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out

	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("go install %s: %w", minioModule, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				hint := ""
				if ctx.Err() != nil {
					hint = fmt.Sprintf(" (stopped after %s; the build cache keeps the progress: run again, with a larger go test -timeout such as 60m)", timeout.Round(time.Second))
				}
				return fmt.Errorf("go install %s failed after %s%s: %v\n%s", minioModule, time.Since(start).Round(time.Second), hint, err, out.String())
			}
			if _, err := os.Stat(bin); err != nil {
				return fmt.Errorf("go install %s succeeded but %s is missing: %v\n%s", minioModule, bin, err, out.String())
			}
			t.Logf("installed %s in %s", bin, time.Since(start).Round(time.Second))
			return nil
		case <-tick.C:
			t.Logf("still building the MinIO server (%s so far)…", time.Since(start).Round(time.Second))
		}
	}
}

// minioServer is a MinIO server process on 127.0.0.1 with its data in a
// temporary directory. Stop and Start simulate the object store going down
// and coming back: same directory, same address, same credentials.
type minioServer struct {
	*proc
	dir       string
	AccessKey string
	SecretKey string
}

// startMinIO starts a fresh MinIO server and waits until it is live. It is
// killed when the test ends; its log is printed when the test failed.
func startMinIO(t testing.TB) *minioServer {
	t.Helper()
	m := &minioServer{dir: t.TempDir(), AccessKey: "rivora-e2e", SecretKey: "rivora-e2e-secret-key"}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	console := "127.0.0.1:" + strconv.Itoa(freePort(t))
	m.proc = newProc(t, "minio", minioBinary(t), addr,
		[]string{"server", m.dir, "--address", addr, "--console-address", console, "--certs-dir", t.TempDir(), "--quiet"})
	m.Env = []string{
		"MINIO_ROOT_USER=" + m.AccessKey,
		"MINIO_ROOT_PASSWORD=" + m.SecretKey,
		"MINIO_UPDATE=off",
		"MINIO_BROWSER=off",
	}
	m.logTail = 16 << 10
	m.watchExit = false // the tests stop and start it; they check what it serves
	m.Start()
	return m
}

// DevArgs are the `rivora dev` (and `rivora agent`) flags that archive to
// this server.
func (m *minioServer) DevArgs(bucket string) []string {
	return []string{
		"--s3-endpoint", m.Addr, "--s3-bucket", bucket,
		"--s3-access-key", m.AccessKey, "--s3-secret-key", m.SecretKey, "--s3-insecure",
	}
}

// Start starts the server (again) on the same directory and address and
// waits until GET /minio/health/live answers 200 and S3 calls are served
// (live comes a moment before the object layer is initialised).
func (m *minioServer) Start() {
	m.t.Helper()
	if m.running() {
		m.t.Fatalf("MinIO Start: already running")
	}
	m.start()
	client := &http.Client{Timeout: 2 * time.Second}
	m.waitReady(90*time.Second, func() error {
		if err := process.GetOK(context.Background(), client, "http://"+m.Addr+"/minio/health/live"); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := m.Client().ListBuckets(ctx); err != nil {
			return fmt.Errorf("live, but ListBuckets: %w", err)
		}
		return nil
	})
}

// Stop ends the server (SIGTERM, then SIGKILL after 10 s) and waits until
// its address refuses connections.
func (m *minioServer) Stop() {
	m.t.Helper()
	if !m.running() {
		m.t.Fatalf("MinIO Stop: not running")
	}
	m.terminate(10 * time.Second)
	client := &http.Client{Timeout: time.Second}
	poll.True(m.t, "the stopped MinIO to stop answering", 10*time.Second, func() bool {
		resp, err := client.Get("http://" + m.Addr + "/minio/health/live")
		if err != nil {
			return true
		}
		resp.Body.Close()
		return false
	})
}

// Client is an S3 client of the server, for checking what Rivora stored.
func (m *minioServer) Client() *minio.Client {
	m.t.Helper()
	c, err := minio.New(m.Addr, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, ""), Secure: false})
	if err != nil {
		m.t.Fatalf("minio client: %v", err)
	}
	return c
}

// Objects lists the keys under prefix in bucket.
func (m *minioServer) Objects(bucket, prefix string) []string {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var keys []string
	for obj := range m.Client().ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			m.t.Fatalf("list s3://%s/%s: %v", bucket, prefix, obj.Err)
		}
		keys = append(keys, obj.Key)
	}
	return keys
}

// BucketExists reports whether bucket exists.
func (m *minioServer) BucketExists(bucket string) bool {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ok, err := m.Client().BucketExists(ctx, bucket)
	if err != nil {
		m.t.Fatalf("bucket exists %s: %v", bucket, err)
	}
	return ok
}
