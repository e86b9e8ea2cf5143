package e2e

// A full disk on one agent: a small filesystem of its own for an agent's
// --data-dir (a tmpfs with a size, so the test needs root, as CI has),
// filled to ENOSPC with a filler file and freed again.

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivora/rivora/e2e/process"
	"github.com/rivora/rivora/testkit/poll"
)

// dataDir is agent name's --data-dir: an ordinary temporary directory, or
// with a limit (limit(name) > 0) a directory on a tmpfs of that size,
// mounted for the test and unmounted when it ends (after the agent, whose
// cleanup runs first).
func (c *clusterCell) dataDir(t testing.TB, name string, limit func(string) int64) string {
	t.Helper()
	if limit == nil || limit(name) <= 0 {
		return t.TempDir()
	}
	mount := t.TempDir()
	size := limit(name)
	if err := syscall.Mount("tmpfs", mount, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Fatalf("agent %s: mount a %d-byte tmpfs at %s for its data dir: %v (a full-disk test mounts a filesystem: it needs root, or CAP_SYS_ADMIN)",
			name, size, mount, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mount, 0); err != nil {
			// Something still holds it (a child not reaped yet): detach
			// it, the kernel frees it when the last user is gone.
			if err := syscall.Unmount(mount, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", mount, err)
			}
		}
	})
	c.disks[name] = mount
	dir := filepath.Join(mount, "data")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fillerPath is the file fillDisk fills agent name's filesystem with.
func (c *clusterCell) fillerPath(name string) string {
	mount, ok := c.disks[name]
	if !ok {
		c.t.Fatalf("agent %s has no disk of its own: give it one with DiskLimit", name)
	}
	return filepath.Join(mount, "filler")
}

// fillDisk fills agent name's filesystem until a write fails with ENOSPC,
// and returns when it is full: not one block is left for the agent. It
// returns how many bytes the filler took.
//
// The agent then stops by itself, with status 1, once its store is
// disabled (docs/architecture.md, "A full disk on one agent"): that exit
// is expected from here on (it no longer fails the test), and the caller
// plays its supervisor with startAgain. Check ownership (owners,
// waitOwned) only once it exited: while it drains, the control plane may
// list a partition it handed off beside its new owner for about a second
// (until the agent's session is gone), which owners reports as an error.
func (c *clusterCell) fillDisk(name string) int64 {
	c.t.Helper()
	c.agents[name].watchExit = false
	f, err := os.OpenFile(c.fillerPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	var written int64
	// Big chunks first, then smaller ones for what is left between them.
	for _, chunk := range []int{1 << 20, 64 << 10, 4 << 10, 512} {
		buf := make([]byte, chunk)
		for {
			n, err := f.Write(buf)
			written += int64(n)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				c.t.Fatalf("fill %s's disk: %v", name, err)
			}
		}
	}
	if free := c.diskFree(name); free != 0 {
		c.t.Fatalf("%s's disk filled with %d bytes but %d bytes are still free", name, written, free)
	}
	return written
}

// freeDisk removes the filler: agent name's filesystem has room again.
func (c *clusterCell) freeDisk(name string) {
	c.t.Helper()
	if err := os.Remove(c.fillerPath(name)); err != nil {
		c.t.Fatalf("free %s's disk: %v", name, err)
	}
}

// startAgain starts agent name's process again, as its supervisor would
// after it exited, appending to the same log so that the checker reads
// every ownership term of the agent. On a disk that is still full the
// agent waits for room before it listens.
func (c *clusterCell) startAgain(name string) {
	c.t.Helper()
	p := c.agents[name]
	// Never two of it at once: a draining agent exits within its
	// attempts' and writes' timeouts. One that does not is a hung drain:
	// the test fails, but goes on (a chaos run still reports every
	// figure) once SIGQUIT wrote the agent's goroutines to its log.
	err := poll.Check(60*time.Second, 50*time.Millisecond, func() error {
		if _, exited := p.Exited(); !exited {
			return errors.New("still running")
		}
		return nil
	})
	if err != nil {
		c.t.Errorf("%s did not exit within 60s of its store being disabled: its drain hung; SIGQUIT wrote its goroutines to the end of its log (%s)", name, p.LogPath)
		p.Quit(10 * time.Second)
	}
	p.start()
}

// diskFree is how many bytes of agent name's filesystem are free.
func (c *clusterCell) diskFree(name string) int64 {
	c.t.Helper()
	var st syscall.Statfs_t
	mount := c.disks[name]
	if err := syscall.Statfs(mount, &st); err != nil {
		c.t.Fatalf("statfs %s: %v", mount, err)
	}
	return int64(st.Bavail) * st.Bsize
}

// agentDisk is the size of each agent's filesystem in TestAgentDiskFull:
// room for a fault run's streams, little to fill.
const agentDisk = 256 << 20

// TestAgentDiskFull: the agent owning the busiest partitions runs out of
// disk under traffic. Its embedded NATS server disables JetStream (as
// nats-server does on ENOSPC, for good); the agent notices, drains —
// hands its partitions to the others — and exits non-zero for its
// supervisor. Started again at once (as Nomad would) while the disk is
// still full, it waits for room, unhealthy and owning nothing. Once the
// filler is removed it starts, rejoins the cell's streams and owns
// partitions again. Nothing is lost or reordered, and no two agents write
// one partition at once.
func TestAgentDiskFull(t *testing.T) {
	r := startFaultRun(t, faultRunOptions{CPArgs: []string{"--rejoin-delay", "5s"},
		DiskLimit: func(string) int64 { return agentDisk }})
	owners := r.c.waitOwned(t, 30*time.Second, nil)
	victim := r.busiestByLanes(owners)
	parts := partitionsOf(owners, victim)
	r.waitFlowing(t, 500)
	agent := r.c.agents[victim]

	fillAt := time.Now()
	filled := r.c.fillDisk(victim)
	t.Logf("filled %s's disk (owning %v) with %d MiB", victim, parts, filled>>20)
	r.waitDeliveredOn(t, parts, []string{victim}, 100)
	t.Logf("MEASURED its partitions delivered by others %s after the fill", time.Since(fillAt).Round(100*time.Millisecond))
	// The drain ends once the writes in flight are answered or time out
	// (a lane write waits up to 19 s for a stream whose leader was here).
	// Until then the control plane may still list the partitions it
	// reported last beside their new owners: ownership is checked after.
	poll.True(t, victim+" exits once its store is disabled", 60*time.Second, func() bool {
		_, exited := agent.Exited()
		return exited
	})
	exitedAfter := time.Since(fillAt)
	exitErr, _ := agent.Exited()
	if exitErr == nil {
		t.Errorf("%s exited with status 0 after its store was disabled, want non-zero (for its supervisor)", victim)
	}
	log := agent.Tail(64 << 10)
	if !strings.Contains(log, "jetstream disabled") || !strings.Contains(log, "disk is full") {
		t.Errorf("%s's log does not say its jetstream was disabled on a full disk:\n%s", victim, log)
	}
	t.Logf("MEASURED %s exited %s after the fill: %v", victim, exitedAfter.Round(100*time.Millisecond), exitErr)
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "jetstream disabled") || strings.Contains(line, "agent stopped") {
			t.Logf("%s: %s", victim, line)
		}
	}
	moved := r.c.waitOwned(t, 30*time.Second, []string{victim})
	t.Logf("its partitions owned by others %s after the fill: %v", time.Since(fillAt).Round(100*time.Millisecond), moved)

	// Its supervisor starts it again at once, on a disk still full.
	r.c.startAgain(victim)
	waiting := "waiting for room on the data directory's disk"
	poll.True(t, victim+" waits for room", 30*time.Second, func() bool { return strings.Contains(agent.Tail(8<<10), waiting) })
	if !agent.running() {
		t.Fatalf("%s, restarted on a full disk, exited instead of waiting for room: %v", victim, agent.diedErr())
	}
	if err := process.GetOK(t.Context(), authedHTTP, agent.URL()+"/healthz"); err == nil {
		t.Errorf("%s answers /healthz while it waits for room", victim)
	}

	freeAt := time.Now()
	r.c.freeDisk(victim)
	t.Logf("freed %s's disk %s after the fill", victim, freeAt.Sub(fillAt).Round(100*time.Millisecond))
	r.waitRejoined(t, victim, 90*time.Second)
	t.Logf("MEASURED %s owns partitions again %s after the disk was freed", victim, time.Since(freeAt).Round(100*time.Millisecond))
	r.waitFlowing(t, r.delivered()+500)
	v := r.finish(t, "full disk on the busiest owner", fillAt, freeAt)
	if v.OverlappingWriters != 0 || v.StaleDeliveries != 0 {
		t.Errorf("%s delivered for partitions it no longer owned", victim)
	}
	if !agent.running() {
		t.Errorf("%s exited again after the disk was freed", victim)
	}
}
