package natsd

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// storeSync opens the store directory and returns a sync of its whole
// filesystem (syncfs(2)) and the close of that directory. The writes a
// barrier must cover are spread over files nats-server owns and Rivora
// does not see (every stream's message blocks, a new block's directory
// entry, the KV buckets' streams): syncfs covers them all, at about the
// cost of one fdatasync on this machine's disk (both ~5.5 ms). It also
// writes out other processes' dirty pages on that filesystem: give a
// --fsync data dir a filesystem of its own where that matters.
func storeSync(dir string) (sync func() error, closeDir func() error, err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("open the store directory to sync it: %w", err)
	}
	return func() error { return unix.Syncfs(int(f.Fd())) }, f.Close, nil
}
