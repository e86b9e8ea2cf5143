package edged

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rivora/rivora/edge"
	"github.com/rivora/rivora/internal/durable"
	"github.com/rivora/rivora/internal/ids"
)

// NameFile is the file under the data dir naming the edge the dir
// belongs to, written at the edge's first start there.
const NameFile = "edge-name"

// claimDataDir checks that dataDir is edge name's, and records the name
// there when the dir has none yet. A data dir keeps the name it was made
// under: its buffer's consumer delivers under that name (the cell's
// source for the name listens there), and an edge started on it under
// another name would acknowledge events that never leave it. A data dir
// made before NameFile was is named by its buffer's subjects (edge.Owner),
// or, with no buffer either, is name's now. js is the edge's server's,
// running on dataDir (whose lock keeps any other process off it).
func claimDataDir(ctx context.Context, dataDir, name string, js jetstream.JetStream) error {
	path := filepath.Join(dataDir, NameFile)
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		owner := strings.TrimSpace(string(data))
		if err := ids.Validate("edge name", owner); err != nil {
			return fmt.Errorf("%s should name the edge whose data dir this is: %w (write back the edge's name)", path, err)
		}
		return sameEdge(dataDir, owner, name)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("read the data dir's edge name: %w", err)
	}
	owner, err := edge.Owner(ctx, js)
	if err != nil {
		return fmt.Errorf("the data dir %s names no edge (no %s), and its buffer, which would, cannot be read: %w", dataDir, NameFile, err)
	}
	if owner != "" {
		if err := sameEdge(dataDir, owner, name); err != nil {
			return err
		}
	}
	if err := durable.WriteFile(path, []byte(name+"\n")); err != nil {
		return fmt.Errorf("record the edge's name in its data dir: %w", err)
	}
	return nil
}

// sameEdge refuses to start edge name on owner's data dir.
func sameEdge(dataDir, owner, name string) error {
	if owner == name {
		return nil
	}
	return fmt.Errorf("data dir %s belongs to edge '%s' (its buffer may hold events not forwarded yet): start it with --name %s, or give the new name a new --data-dir", dataDir, owner, owner)
}

// InstanceFile is the file under the data dir holding the instance id
// the edge's processes on it claim the edge's name with (claim.go),
// drawn at the first start there.
const InstanceFile = "edge-instance"

// dataDirInstance is the instance id of the edge processes on dataDir,
// drawn and recorded there at the first start. It is the data dir's, not
// the process's: the dir's lock keeps any other process off it, so a
// process restarted on it is the name's holder still, and takes the name
// back at once, where a new id was refused its previous process's claim
// until that lapsed (and the restarted edge served nothing meanwhile).
// An edge on another data dir under the same name has another id, and is
// refused while this one runs.
func dataDirInstance(dataDir string) (string, error) {
	path := filepath.Join(dataDir, InstanceFile)
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(data))
		if id == "" || strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r > '~' }) {
			return "", fmt.Errorf("%s should hold this edge's instance id, not %q: remove it (the edge draws a new one, and may then wait up to %s for its name at its next start)", path, data, nameWait)
		}
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("read the data dir's edge instance id: %w", err)
	}
	id := rand.Text()
	if err := durable.WriteFile(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("record the edge's instance id in its data dir: %w", err)
	}
	return id, nil
}
