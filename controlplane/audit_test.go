package controlplane_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/internal/bounds"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// A limits file refused for a value of 5 MB is audited with a bounded
// detail, and ListAudit keeps answering (issue 22).
func TestAuditOfAHugeRefusedLimitsFileIsBounded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(path, []byte("defaults:\n  burst: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := rig.StartDev(t, t.TempDir(), rig.Options{NoAgent: true, ControlPlane: func(c *controlplane.Config) {
		c.LimitsPath, c.ReloadEvery = path, 10*time.Millisecond
	}})
	huge := "defaults:\n  burst: " + strings.Repeat("k", 5<<20) + "\n"
	if err := os.WriteFile(path+".tmp", []byte(huge), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var reject *rivorav1.AuditEntry
	poll.True(t, "the huge file is refused and audited", 10*time.Second, func() bool {
		resp, err := d.Admin.ListAudit(ctx, connect.NewRequest(&rivorav1.ListAuditRequest{Limit: 1000}))
		if err != nil {
			t.Fatalf("ListAudit after the refusal: %v", err)
		}
		for _, e := range resp.Msg.GetEntries() {
			if e.GetAction() == "limits.reject" {
				reject = e
			}
		}
		return reject != nil
	})
	if n := len(reject.GetDetail()); n > bounds.AuditDetail {
		t.Fatalf("the reject's detail is %d bytes, over %d", n, bounds.AuditDetail)
	}
	if !strings.Contains(reject.GetDetail(), "limits.yaml") || !strings.Contains(reject.GetDetail(), "[cut: ") {
		t.Errorf("the reject's detail %q does not name the file and say it was cut", reject.GetDetail())
	}
}

// A line the audit log cannot read (damage, or one written before
// entries were bounded) is skipped: the entries around it still list.
func TestAuditListSkipsUnreadableLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := controlplane.OpenAuditLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Append(&rivorav1.AuditEntry{Action: "destination.create", DestinationId: "a"}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "audit.ndjson"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A 5 MB entry as the unbounded writer left it, then garbage.
	if _, err := f.WriteString(`{"action":"limits.reject","detail":"` + strings.Repeat("k", 5<<20) + "\"}\n{not json\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Append(&rivorav1.AuditEntry{Action: "destination.delete", DestinationId: "a"}); err != nil {
		t.Fatal(err)
	}
	got, err := a.List(0, "")
	if err != nil {
		t.Fatalf("List with unreadable lines: %v", err)
	}
	if len(got) != 2 || got[0].GetAction() != "destination.create" || got[1].GetAction() != "destination.delete" {
		t.Fatalf("List = %v, want the create and the delete around the bad lines", got)
	}
}

// An entry appended with a detail of megabytes (by any writer) is stored
// cut, and lists (issue 22).
func TestAuditAppendBoundsTheEntry(t *testing.T) {
	t.Parallel()
	a, err := controlplane.OpenAuditLog(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Control characters: each is escaped to six bytes in the record.
	if err := a.Append(&rivorav1.AuditEntry{Action: "lane.skip", Detail: strings.Repeat("\x01", 5<<20), Reason: strings.Repeat("r", 1<<20)}); err != nil {
		t.Fatal(err)
	}
	got, err := a.List(0, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("List = %d entries, want the one appended", len(got))
	}
	if len(got[0].GetDetail()) > bounds.AuditDetail || len(got[0].GetReason()) > bounds.Text || !strings.Contains(got[0].GetDetail(), "[cut: 5242880 bytes]") {
		t.Fatalf("the entry has a %d-byte detail and a %d-byte reason: want them cut to %d and %d", len(got[0].GetDetail()), len(got[0].GetReason()), bounds.AuditDetail, bounds.Text)
	}
}

// The audit log holds destination URLs (their query may hold a partner's
// credential): it is created 0600, and one an older version left 0644 is
// made 0600 when opened.
func TestAuditLogIsOwnerOnly(t *testing.T) {
	t.Parallel()
	mode := func(path string) os.FileMode {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	fresh := t.TempDir()
	a, err := controlplane.OpenAuditLog(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Append(&rivorav1.AuditEntry{Action: "destination.create", DestinationId: "a", Detail: "url https://erp.example.com/in?apikey=SECRET"}); err != nil {
		t.Fatal(err)
	}
	if m := mode(filepath.Join(fresh, "audit.ndjson")); m != 0o600 {
		t.Errorf("a new audit log is mode %v; want 0600", m)
	}
	old := t.TempDir()
	path := filepath.Join(old, "audit.ndjson")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	if _, err := controlplane.OpenAuditLog(old); err != nil {
		t.Fatal(err)
	}
	if m := mode(path); m != 0o600 {
		t.Errorf("an existing 0644 audit log is mode %v once opened; want 0600", m)
	}
}
