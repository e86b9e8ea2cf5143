package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/diskroom"
	"github.com/rivora/rivora/internal/errkind"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// smallDisk is a directory on a tmpfs of size bytes, mounted for the test
// (it needs root, as CI has) and unmounted after everything else.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	mount := t.TempDir()
	if err := syscall.Mount("tmpfs", mount, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs at %s: %v (this test fills a filesystem of its own: it needs root, or CAP_SYS_ADMIN)", size, mount, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mount, 0); err != nil {
			_ = syscall.Unmount(mount, syscall.MNT_DETACH)
		}
	})
	dir := filepath.Join(mount, "data")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A customer publishing to a destination that is down fills the agent's
// store: before it is full, that customer's events are refused
// (resource_exhausted, DISK_LOW naming it) while another customer's
// still go in, and the store never reaches its limit.
func TestAFloodingCustomerIsRefusedBeforeTheStoreFills(t *testing.T) {
	const minFree = 12 << 20
	dir := smallDisk(t, 64<<20)
	r := &running{Dev: rig.StartDev(t, dir, rig.Options{Name: agentName, Agent: func(c *agent.Config) { c.MinFreeDisk = minFree }}), t: t}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() + "/hook"
	ln.Close() // nothing listens: every attempt fails, every event stays pending
	r.create(destination("shared", down, 100))
	room := r.Agent.Room()
	level, start := room.Level()
	if level != diskroom.Roomy {
		t.Fatalf("a fresh store: level %v with %d bytes of room", level, start)
	}
	payload := bytes.Repeat([]byte("x"), 200<<10)
	publish := func(customer string, i int) error {
		_, err := r.Ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{
			DestinationId: "shared", CustomerId: customer, LaneKey: fmt.Sprintf("l%d", i%8), Type: "test.event",
			ContentType: "application/octet-stream", Payload: payload,
		}))
		return err
	}
	// Chunks of 4 MiB, each seen by the watch (a look a second) before the
	// next: the low band (12 MiB wide) is never jumped over.
	var refused error
	published := 0
	for chunk := 0; chunk < 40 && refused == nil; chunk++ {
		_, before := room.Level()
		for range 20 {
			if refused = publish("flood", published); refused != nil {
				break
			}
			published++
		}
		if refused == nil {
			poll.True(t, "the watch sees the chunk", 5*time.Second, func() bool {
				_, now := room.Level()
				return now < before-(1<<20)
			})
		}
	}
	if refused == nil {
		t.Fatalf("%d events of 200 KiB all taken; want the flooding customer refused before the store fills", published)
	}
	md, ok := errkind.Info(refused, diskroom.DiskLowReason)
	if connect.CodeOf(refused) != connect.CodeResourceExhausted || !ok || md["customer"] != "flood" {
		t.Fatalf("after %d events: refused %v (detail %v), want resource_exhausted with DISK_LOW naming customer flood", published, refused, md)
	}
	level, left := room.Level()
	t.Logf("customer flood refused after %d events (%d MiB of room left of %d)", published, left>>20, start>>20)
	if level != diskroom.Low || left < minFree {
		t.Fatalf("refused at level %v with %d bytes of room; want low, above --min-free-disk", level, left)
	}
	for i := range 3 {
		if err := publish("quiet", i); err != nil {
			t.Fatalf("another customer's event %d refused while only the flood is: %v", i, err)
		}
	}
	if err := publish("flood", published); err == nil {
		t.Fatal("the flooding customer's next event was taken")
	}
	if _, err := r.Agent.JetStream().AccountInfo(context.Background()); err != nil {
		t.Fatalf("the store is not up after the refusals: %v", err)
	}
}
