package server

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/rivora/rivora/agent"
	"github.com/rivora/rivora/agent/natsd"
	"github.com/rivora/rivora/controlplane"
)

// A second rivora dev on a data dir in use stops before its control plane
// opens (and may truncate) the state the running one keeps there.
func TestDevRefusesADataDirInUse(t *testing.T) {
	dir := t.TempDir()
	held, err := natsd.LockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	stateDir := filepath.Join(dir, "controlplane")
	err = RunDev(context.Background(), DevOptions{
		Log:          slog.New(slog.DiscardHandler),
		HTTP:         HTTP{Listen: "127.0.0.1:0"},
		ControlPlane: controlplane.Config{StateDir: stateDir},
		Agent:        agent.Config{Name: "dev", DataDir: dir},
	})
	if !errors.Is(err, natsd.ErrDataDirInUse) {
		t.Fatalf("RunDev on a data dir in use: %v, want ErrDataDirInUse", err)
	}
	if _, err := os.Stat(stateDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused dev opened its control plane's state dir: %v", err)
	}
}
