package archive_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/archive"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// refusingLinks is a file system without hard links: every link is
// refused with errno. The count of links tried is in *tries.
func refusingLinks(errno syscall.Errno, tries *int) func(oldname, newname string) error {
	return func(oldname, newname string) error {
		*tries++
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: errno}
	}
}

// files are the paths of the regular files under root, as keys.
func files(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		out = append(out, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Where links are refused as a file system without hard links refuses
// them (vfat and exfat: EPERM; CIFS, FUSE: EOPNOTSUPP, ENOSYS; a union
// file system: EXDEV), the directory archive still writes, and still never
// replaces an object; it leaves no temp file or claim behind.
func TestDirWithoutHardLinksNeverReplacesAnObject(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EPERM, syscall.EOPNOTSUPP, syscall.ENOSYS, syscall.EXDEV} {
		t.Run(errno.Error(), func(t *testing.T) {
			root := t.TempDir()
			tries := 0
			d, err := archive.NewDirLinkingWith(root, refusingLinks(errno, &tries))
			if err != nil {
				t.Fatal(err)
			}
			checkNeverReplaces(t, d)
			if tries == 0 {
				t.Fatal("no link was tried: the test did not stand in a file system without hard links")
			}
			keys, err := d.List(context.Background(), archive.Prefix)
			if err != nil {
				t.Fatal(err)
			}
			if got := files(t, root); !slices.Equal(got, keys) {
				t.Fatalf("files under the root %q, want only the objects %q", got, keys)
			}
		})
	}
}

// A link refused for another reason (a failing disk, no permission) is
// not taken for a file system without hard links: the write fails, and
// claims no name.
func TestDirPutFailsOnAnotherLinkError(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EIO, syscall.EACCES, syscall.ENOSPC} {
		t.Run(errno.Error(), func(t *testing.T) {
			root := t.TempDir()
			tries := 0
			d, err := archive.NewDirLinkingWith(root, refusingLinks(errno, &tries))
			if err != nil {
				t.Fatal(err)
			}
			key := archive.Key("orders", time.Now(), 0, 1, 1)
			written, err := d.Put(context.Background(), key, []*rivorav1.DeadLetter{letter("e1", 1)})
			if !errors.Is(err, errno) || written != "" {
				t.Fatalf("Put = %q, %v; want no key and the link's error, %v", written, err, errno)
			}
			if got := files(t, root); len(got) != 0 {
				t.Fatalf("files under the root after a failed write: %q", got)
			}
		})
	}
}

// A crash between claiming a name and renaming the object over the claim
// (on a file system without hard links) leaves an empty file under the
// name. It is no object: List skips it, so dlq and replay never read it,
// and the write, retried, goes to the next variant.
func TestDirCrashedClaimIsNoObject(t *testing.T) {
	root := t.TempDir()
	d, err := archive.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dls := []*rivorav1.DeadLetter{letter("e1", 1)}
	key := archive.Key("orders", dls[0].GetDeadAt().AsTime(), 3, 1, 1)
	claim := filepath.Join(root, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(claim), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(claim, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if keys, err := d.List(ctx, archive.Prefix); err != nil || len(keys) != 0 {
		t.Fatalf("List = %q, %v; want no object (an empty file is a claim)", keys, err)
	}
	want := archive.VariantKey(key, 2)
	if written, err := d.Put(ctx, key, dls); err != nil || written != want {
		t.Fatalf("Put = %q, %v; want %q (the claim holds the name)", written, err, want)
	}
	keys, err := d.List(ctx, archive.Prefix)
	if err != nil || !slices.Equal(keys, []string{want}) {
		t.Fatalf("List = %q, %v; want only %s", keys, err, want)
	}
	if got, err := d.Get(ctx, want); err != nil || ids(got) != "e1" {
		t.Fatalf("Get(%s) = %s, %v; want e1", want, ids(got), err)
	}
}
