package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/controlplane"
	"github.com/rivora/rivora/edge/edged"
	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/ports"
)

// rivora dev, agent and edge let their data dir go last: once their
// HTTP server answers no more and no request is being handled, after the
// control plane and NATS stopped. The embedded NATS server released it
// as it stopped, and the HTTP server then still answered for up to a
// second: a second process could open the dir meanwhile.
func TestTheDataDirIsReleasedLast(t *testing.T) {
	cell := auth.CellTokenOf(strings.Repeat("c", auth.MinCellTokenBytes))
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name string
		run  func(ctx context.Context, dir string, http HTTP) error
	}{
		{"dev", func(ctx context.Context, dir string, http HTTP) error {
			return RunDev(ctx, DevOptions{Log: log, HTTP: http, Cell: cell,
				ControlPlane: controlplane.Config{StateDir: filepath.Join(dir, "controlplane")}, Agent: agent.Config{Name: "dev", DataDir: dir}})
		}},
		{"agent", func(ctx context.Context, dir string, http HTTP) error {
			return RunAgent(ctx, AgentOptions{Log: log, HTTP: http,
				Agent: agent.Config{Name: "a1", DataDir: dir, ControlPlaneURL: "http://127.0.0.1:1", Keys: auth.NewKeys(cell)}})
		}},
		{"edge", func(ctx context.Context, dir string, http HTTP) error {
			return RunEdge(ctx, EdgeOptions{Log: log, HTTP: http,
				Edge: edged.Config{Name: "shop-1", DataDir: dir, CellLeaf: []string{"nats-leaf://127.0.0.1:1"}, ControlPlanes: []string{"http://127.0.0.1:1"}, Keys: auth.NewKeys(cell)}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkReleasedLast(t, tc.run) })
	}
}

// checkReleasedLast runs a process with a request in flight at its stop
// (a goroutine profile over a minute, which ends when its connection is
// closed) and checks, the moment the data dir's lock can be had, that
// no request is being handled and the connection is closed.
func checkReleasedLast(t *testing.T, run func(context.Context, string, HTTP) error) {
	dir := t.TempDir()
	addr, err := ports.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, dir, HTTP{Listen: addr, Pprof: true}) }()
	var conn net.Conn
	poll.True(t, "the process listens", 30*time.Second, func() bool {
		conn, err = net.Dial("tcp", addr)
		return err == nil
	})
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET /debug/pprof/goroutine?seconds=60 HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
		t.Fatal(err)
	}
	poll.True(t, "the request being handled", 10*time.Second, handlingProfile)
	cancel()
	waitForLock(t, dir)
	if handlingProfile() {
		t.Error("the data dir's lock was released while a request was still being handled")
	}
	if open := stillOpen(t, conn); open {
		t.Error("the data dir's lock was released while the HTTP server still held the request's connection open")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("still running 30s after its context ended")
	}
}

// handlingProfile reports whether a goroutine serves a delta profile
// (/debug/pprof/goroutine?seconds=N) now.
func handlingProfile() bool {
	buf := make([]byte, 1<<22)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "pprof.handler.serveDeltaProfile")
}

// waitForLock waits until the data dir's lock is free, takes it and
// releases it.
func waitForLock(t *testing.T, dir string) {
	f, err := os.OpenFile(filepath.Join(dir, natsd.LockFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	locked := make(chan error, 1)
	go func() {
		for {
			err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
			if !errors.Is(err, unix.EINTR) {
				locked <- err
				return
			}
		}
	}()
	select {
	case err := <-locked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the data dir's lock was not released within 60s of the stop")
	}
}

// stillOpen reports whether conn is open at the other end: a read that
// does not wait finds neither data, nor its end, nor a reset.
func stillOpen(t *testing.T, conn net.Conn) bool {
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var readErr error
	if err := raw.Read(func(fd uintptr) bool {
		_, _, readErr = unix.Recvfrom(int(fd), make([]byte, 1), unix.MSG_DONTWAIT|unix.MSG_PEEK)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return errors.Is(readErr, syscall.EAGAIN)
}
