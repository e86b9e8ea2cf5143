// Package durable writes files that survive a crash whole: the control
// plane's state and an edge's kept config.
package durable

import (
	"os"
	"path/filepath"
)

// WriteFile replaces path with data: a temp file beside it (mode 0600),
// fsync, rename, then fsync of the directory so the rename survives a
// crash. A reader sees the old content or the new, never a part.
func WriteFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir makes dir's entries (a create, a rename) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
