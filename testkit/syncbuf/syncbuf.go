// Package syncbuf is the one buffer tests write from one goroutine (a
// process's pipes, a logger, a handler) and read from another.
package syncbuf

import (
	"strings"
	"sync"
)

// Buffer is a strings.Builder safe for one writer and readers at once.
// The zero value is empty and ready.
type Buffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
