package natsd_test

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rivora/rivora/agent/natsd"
)

// A port already taken fails Start at once with a ListenError naming the
// port, its address and the OS's reason, and leaves the data dir free:
// nats-server said so only in its log (off), and Start failed 30 s later
// with "not ready after 30s".
func TestAPortInUseFailsStartAtOnce(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, tc := range []struct {
		port string
		cfg  natsd.Config
	}{
		{natsd.ClientPort, natsd.Config{ClientListen: addr}},
		{natsd.ClusterPort, natsd.Config{Name: "a1", ClusterListen: addr}},
		{natsd.LeafPort, natsd.Config{LeafListen: addr}},
	} {
		tc.cfg.DataDir = t.TempDir()
		srv, err := natsd.Start(tc.cfg, slog.New(slog.DiscardHandler))
		if err == nil {
			srv.Shutdown()
			t.Errorf("%s port on %s, which is in use: started", tc.port, addr)
			continue
		}
		var port *natsd.ListenError
		if !errors.As(err, &port) || port.Port != tc.port || port.Addr != addr || !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("%s port on %s, which is in use: %v, want a ListenError of that port with EADDRINUSE", tc.port, addr, err)
		}
		if want := "nats " + tc.port + " port " + addr + ": bind: address already in use"; err.Error() != want {
			t.Errorf("%s port in use: %q, want %q", tc.port, err, want)
		}
		lock, err := natsd.LockDataDir(tc.cfg.DataDir)
		if err != nil {
			t.Errorf("the data dir after a failed start: %v", err)
			continue
		}
		lock.Release()
	}
}

// A fatal error of the server's start (here a store JetStream cannot
// open: a file where its directory goes) fails Start at once with the
// server's reason, where Start waited 30 s and said only that the server
// was not ready.
func TestAFatalStartErrorIsReportedAtOnce(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "jetstream"), []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := natsd.Start(natsd.Config{DataDir: dir}, slog.New(slog.DiscardHandler))
	if err == nil {
		srv.Shutdown()
		t.Fatal("started on a store that is a file")
	}
	if !strings.Contains(err.Error(), "Can't start JetStream") || strings.Contains(err.Error(), "not ready") {
		t.Fatalf("Start on a store that is a file: %v, want the server's reason (Can't start JetStream)", err)
	}
}
