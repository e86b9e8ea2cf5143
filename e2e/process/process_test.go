package process

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/testkit/poll"
)

func sleeper(t *testing.T) *Proc {
	t.Helper()
	p := New(Options{Name: "sleeper", Bin: "/bin/sh", Args: []string{"-c", "echo started; exec sleep 30"},
		LogPath: filepath.Join(t.TempDir(), "sleeper.log")})
	t.Cleanup(p.Kill)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProcTerminateIsNotADeath(t *testing.T) {
	p := sleeper(t)
	if !p.Running() {
		t.Fatal("not running after Start")
	}
	if _, exited, err := p.Terminate(5 * time.Second); err != nil || !exited {
		t.Fatalf("Terminate: exited=%v err=%v", exited, err)
	}
	if p.Running() || p.Died() != nil {
		t.Fatalf("after Terminate: running=%v died=%v", p.Running(), p.Died())
	}
	if !strings.Contains(p.Tail(1<<10), "started") {
		t.Fatalf("log tail %q lacks the process's output", p.Tail(1<<10))
	}
}

func TestProcExitNobodyAskedForIsADeath(t *testing.T) {
	p := sleeper(t)
	cmd, _ := p.current()
	cmd.Process.Kill() // from outside: neither Terminate nor Kill
	if err := poll.Until(context.Background(), 5*time.Second, time.Millisecond, func() error {
		if _, exited := p.Exited(); !exited {
			return errors.New("still running")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.Died(); err == nil || !strings.Contains(err.Error(), "sleeper (run 1) exited on its own") {
		t.Fatalf("Died = %v, want the unasked exit of run 1", err)
	}
	if err := p.WaitReady(context.Background(), time.Second, time.Millisecond, func() error { return nil }); err == nil {
		t.Fatal("WaitReady on an exited process succeeded")
	}
}

func TestProcRestartAppendsToTheLog(t *testing.T) {
	p := sleeper(t)
	if err := p.Kill9(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if !p.Running() || p.Died() != nil {
		t.Fatalf("after restart: running=%v died=%v", p.Running(), p.Died())
	}
	log := p.Tail(1 << 10)
	if !strings.Contains(log, "==== run 1:") || !strings.Contains(log, "==== run 2:") {
		t.Fatalf("log %q does not hold both runs", log)
	}
}
