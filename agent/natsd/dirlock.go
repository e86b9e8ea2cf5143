package natsd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// LockFile is the file under a data dir whose lock (LockDataDir) says a
// process has the dir's store open. It holds that process's pid, for the
// message another one gets.
const LockFile = "rivora.lock"

// ErrDataDirInUse: another process (or another server in this one) holds
// the data dir's lock. Two JetStream servers on one store overwrite each
// other's files: events one acknowledged are lost.
var ErrDataDirInUse = errors.New("data dir in use")

// DirLock is the exclusive lock on a data dir (LockDataDir): an advisory
// lock (flock(2)) on LockFile, held through an open file. The kernel
// drops it when that file is closed or its process exits, however it
// exits: a lock file left by a killed process blocks nobody.
type DirLock struct {
	dir  string
	f    *os.File
	once sync.Once
}

// LockDataDir takes dir's lock (creating dir if missing), or fails at
// once, wrapping ErrDataDirInUse, when another holds it: in another
// process, or on another open of the file in this one.
func LockDataDir(dir string) (*DirLock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create the data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open the data dir's lock file: %w", err)
	}
	held, err := lockFile(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock the data dir %s (%s): %w", dir, path, err)
	}
	if !held {
		_ = f.Close()
		return nil, &inUseError{dir: dir, holder: holder(path)}
	}
	// The pid is only for that message: a failure to write it leaves the
	// lock held.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &DirLock{dir: dir, f: f}, nil
}

// inUseError is ErrDataDirInUse, with the dir and its holder.
type inUseError struct{ dir, holder string }

func (e *inUseError) Error() string {
	return fmt.Sprintf("data dir %s is in use by another Rivora process (%s): one process per data dir", e.dir, e.holder)
}

func (e *inUseError) Is(target error) bool { return target == ErrDataDirInUse }

// holder names the process that holds the lock file at path, as far as
// the pid it wrote tells.
func holder(path string) string {
	data, err := os.ReadFile(path)
	if pid, perr := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && perr == nil && pid > 0 {
		return "pid " + strconv.Itoa(pid)
	}
	return "pid unknown"
}

// Dir is the locked data dir.
func (l *DirLock) Dir() string { return l.dir }

// Release drops the lock (closing its file). Calls after the first, and
// on nil, do nothing. The file stays: the next holder truncates it.
func (l *DirLock) Release() {
	if l == nil {
		return
	}
	l.once.Do(func() { _ = l.f.Close() })
}
