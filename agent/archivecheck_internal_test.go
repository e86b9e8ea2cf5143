package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/archive"
	"github.com/rivora/rivora/testkit/ports"
	"github.com/rivora/rivora/testkit/syncbuf"
)

// An agent whose S3 archive cannot be reached says so at startup, at
// WARN, and goes on (dead letters wait in the ledger); nothing said so
// until a dead letter failed to be written. A reachable archive is
// checked without leaving anything in it.
func TestArchiveCheckAtStartup(t *testing.T) {
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	port, err := ports.Free()
	if err != nil {
		t.Fatal(err)
	}
	down, err := archive.NewS3(archive.S3Config{Endpoint: fmt.Sprintf("127.0.0.1:%d", port), Bucket: "dead-letters", AccessKey: "k", SecretKey: "s", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkArchive(context.Background(), down, 2*time.Second, log); err == nil {
		t.Fatal("an S3 archive nobody listens for: checked fine")
	}
	out := logs.String()
	for _, want := range []string{"level=WARN", "the dead-letter archive cannot be reached", "dead letters stay in their partition's ledger", "dead-letters"} {
		if !strings.Contains(out, want) {
			t.Errorf("startup log lacks %q:\n%s", want, out)
		}
	}

	dir := t.TempDir()
	up, err := archive.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkArchive(context.Background(), up, 2*time.Second, log); err != nil {
		t.Fatalf("a local directory: %v", err)
	}
	if !strings.Contains(logs.String(), "the dead-letter archive is reachable") {
		t.Errorf("startup log lacks the reachable archive:\n%s", logs.String())
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Fatalf("the check left %v in the archive (%v)", left, err)
	}
}
