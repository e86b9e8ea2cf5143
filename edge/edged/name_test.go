package edged_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rivora/rivora/edge/edged"
	"github.com/rivora/rivora/internal/auth"
)

// A data dir keeps the name of the edge it was made under: restarted
// under another name on it, an edge is refused, saying whose dir it is
// and what to do. (It used to start, and every event it acknowledged
// under the new name stayed in its buffer for ever: the buffer's
// consumer delivered under the old name.) A data dir made before the
// name was recorded is named by its buffer's subjects.
func TestADataDirKeepsItsEdgesName(t *testing.T) {
	_, cpServer := startControlPlane(t)
	dir := t.TempDir()
	cfg := func(name string) edged.Config {
		return edged.Config{Name: name, DataDir: dir, CellLeaf: []string{"nats-leaf://" + freeAddr(t)}, ControlPlanes: []string{cpServer.URL}, MaxBuffer: 1 << 20}
	}
	startEdge(t, cfg("lyon")).stop()
	if data, err := os.ReadFile(filepath.Join(dir, edged.NameFile)); err != nil || string(data) != "lyon\n" {
		t.Fatalf("the data dir's name file: %q, %v; want lyon", data, err)
	}

	want := fmt.Sprintf("data dir %s belongs to edge 'lyon' (its buffer may hold events not forwarded yet): start it with --name lyon, or give the new name a new --data-dir", dir)
	refused := func(why string) {
		t.Helper()
		c := cfg("lyonr")
		c.Keys = auth.NewKeys(auth.CellTokenOf(cellSecret))
		e, err := edged.New(context.Background(), c, slog.New(slog.DiscardHandler))
		if err == nil {
			_ = e.Run(canceled())
			t.Fatalf("%s: edge lyonr started on lyon's data dir", why)
		}
		if err.Error() != want {
			t.Fatalf("%s: %v, want %q", why, err, want)
		}
	}
	refused("name file")
	startEdge(t, cfg("lyon")).stop()

	// A data dir from before the name file: its buffer names it.
	if err := os.Remove(filepath.Join(dir, edged.NameFile)); err != nil {
		t.Fatal(err)
	}
	refused("no name file, a buffer")
	if _, err := os.Stat(filepath.Join(dir, edged.NameFile)); !os.IsNotExist(err) {
		t.Fatalf("a refused start recorded a name: %v", err)
	}
	startEdge(t, cfg("lyon")).stop()
	if data, err := os.ReadFile(filepath.Join(dir, edged.NameFile)); err != nil || strings.TrimSpace(string(data)) != "lyon" {
		t.Fatalf("the name file after a start on a dir from before it: %q, %v", data, err)
	}
}

// canceled is a context that has ended: Run then stops the edge at once.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
