package natsd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/agent/natsd"
)

// A second server on a data dir a running one has open is refused at
// Start, with a message naming the dir and the holder's pid, and the first
// keeps its store; once the first shut down, the dir opens again. Two
// servers on one store overwrite each other's files (a probe lost 573 of
// 1,000 events an edge had acknowledged).
func TestAStoreInUseIsRefused(t *testing.T) {
	dir := t.TempDir()
	first, err := natsd.Start(natsd.Config{DataDir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Shutdown()
	ctx := t.Context()
	if _, err := first.JetStream().CreateStream(ctx, jetstream.StreamConfig{Name: "KEPT", Subjects: []string{"kept"}}); err != nil {
		t.Fatal(err)
	}

	second, err := natsd.Start(natsd.Config{DataDir: dir}, slog.New(slog.DiscardHandler))
	if err == nil {
		second.Shutdown()
		t.Fatal("a second server started on a data dir in use")
	}
	want := fmt.Sprintf("data dir %s is in use by another Rivora process (pid %d): one process per data dir", dir, os.Getpid())
	if !errors.Is(err, natsd.ErrDataDirInUse) || err.Error() != want {
		t.Fatalf("second Start: %v, want ErrDataDirInUse: %q", err, want)
	}
	if _, err := first.JetStream().Publish(ctx, "kept", []byte("x")); err != nil {
		t.Fatalf("the first server after the refused one: %v", err)
	}

	first.Shutdown()
	again, err := natsd.Start(natsd.Config{DataDir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Start after the holder shut down: %v", err)
	}
	defer again.Shutdown()
	s, err := again.JetStream().Stream(ctx, "KEPT")
	if err != nil || s.CachedInfo().State.Msgs != 1 {
		t.Fatalf("the store after a restart: %v", err)
	}
}

// A lock given to Start (rivora dev, agent and edge take it before
// anything opens the dir) stays the caller's: Shutdown leaves it held, for
// the caller releases it last, after its HTTP server has stopped too. A
// lock on another dir is refused, and left to its caller too.
func TestStartWithTheCallersLock(t *testing.T) {
	dir := t.TempDir()
	lock, err := natsd.LockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsd.LockDataDir(dir); !errors.Is(err, natsd.ErrDataDirInUse) {
		t.Fatalf("LockDataDir of a locked dir: %v, want ErrDataDirInUse", err)
	}
	srv, err := natsd.Start(natsd.Config{DataDir: dir, Lock: lock}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Start with the dir's lock: %v", err)
	}
	srv.Shutdown()
	if _, err := natsd.LockDataDir(dir); !errors.Is(err, natsd.ErrDataDirInUse) {
		t.Fatalf("the caller's lock after Shutdown: %v, want it still held (ErrDataDirInUse)", err)
	}
	lock.Release()
	if l, err := natsd.LockDataDir(dir); err != nil {
		t.Fatalf("the dir once its caller released the lock: %v", err)
	} else {
		l.Release()
	}
	other, err := natsd.LockDataDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	if srv, err := natsd.Start(natsd.Config{DataDir: dir, Lock: other}, slog.New(slog.DiscardHandler)); err == nil {
		srv.Shutdown()
		t.Fatal("Start with another dir's lock")
	}
	if _, err := natsd.LockDataDir(other.Dir()); !errors.Is(err, natsd.ErrDataDirInUse) {
		t.Fatalf("the refused lock: %v, want it still its caller's (ErrDataDirInUse)", err)
	}
}

// holdEnv names the data dir a child (this test binary again) locks
// before it prints "locked" and waits to be killed.
const holdEnv = "RIVORA_TEST_HOLD_DATA_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holdEnv); dir != "" {
		if _, err := natsd.LockDataDir(dir); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("locked")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Another process's lock refuses the dir, naming its pid; once that
// process is killed (kill -9: no cleanup), the lock file it left blocks
// nobody.
func TestAKilledHoldersLockIsGone(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), holdEnv+"="+dir)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("the child did not lock the dir: %q, %v", line, err)
	}

	srv, err := natsd.Start(natsd.Config{DataDir: dir}, slog.New(slog.DiscardHandler))
	if err == nil {
		srv.Shutdown()
		t.Fatal("Start on a dir another process locked")
	}
	if want := fmt.Sprintf("(pid %d)", child.Process.Pid); !errors.Is(err, natsd.ErrDataDirInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Start on another process's dir: %v, want ErrDataDirInUse naming %s", err, want)
	}

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	srv, err = natsd.Start(natsd.Config{DataDir: dir}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Start after the holder was killed: %v", err)
	}
	srv.Shutdown()
}
