package controlplane

import "sync"

// group owns goroutines a component starts outside any one call, so that
// the component's Run can wait for them. Once closed it starts no more:
// work offered while the component stops is dropped, which is what the
// callers want (their context has ended too).
type group struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Go runs f in a new goroutine, unless the group is closed; it reports
// whether f runs.
func (g *group) Go(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Go(f)
	return true
}

// close refuses new goroutines and waits for the running ones.
func (g *group) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}

// broadcaster wakes every waiter at once: wait returns a channel that the
// next notify closes. The zero value is ready to use.
type broadcaster struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed by the next notify; take it before looking
// at the state it signals changes of, so no change is missed.
func (b *broadcaster) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// notify wakes everyone waiting.
func (b *broadcaster) notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
	}
	b.ch = make(chan struct{})
}
