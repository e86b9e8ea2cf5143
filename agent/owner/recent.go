package owner

import (
	"hash/maphash"
	"sync"
	"time"
)

// recentIDs remembers the dedup ids the lane writer stored (or was
// answered were stored) within the last dedup window, so that the ingest
// gateway can tell, without asking the stream, that a batch's keyed event
// is new to its lanes and skip the probe before storing it
// (ingest.LocalStore.MayHold). The writer is the lane store's only
// writer, so once a whole window has passed since the store was last
// written before it began (at once for a new store), every id in the
// stream's dedup window passed through it.
//
// It is a Bloom filter in two generations, each covering one window: an
// id added is found for at least one window (a false "may hold" only costs
// the probe), never missed. Its memory is fixed: 2 × recentBits bits.
type recentIDs struct {
	mu     sync.Mutex
	window time.Duration
	// since is when the lane store was last written before this writer
	// began: until since+window the stream's dedup window may hold ids
	// the writer never saw, and every id may be held.
	since   time.Time
	rotated time.Time // when cur began
	cur     []uint64
	prev    []uint64
	seed    maphash.Seed
	now     func() time.Time
}

const (
	// recentBits per generation (256 KiB): ~0.03% false positives at 75k
	// ids per window (a partition's share of 10k events/s for 2 minutes).
	recentBits   = 1 << 21
	recentHashes = 4
)

// newRecentIDs starts empty for a writer whose lane store was last
// written at lastWrite (zero: never).
func newRecentIDs(window time.Duration, lastWrite time.Time, now func() time.Time) *recentIDs {
	if window <= 0 {
		window = 2 * time.Minute // JetStream's default duplicate window
	}
	return &recentIDs{
		window: window, since: lastWrite, rotated: now(), now: now, seed: maphash.MakeSeed(),
		cur: make([]uint64, recentBits/64), prev: make([]uint64, recentBits/64),
	}
}

// add notes the dedup ids of a stored group (nil r: a writer without
// one, in tests, notes nothing).
func (r *recentIDs) add(reqs []*appendReq) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotate()
	for _, req := range reqs {
		for _, it := range req.items {
			h1, h2 := r.hashes(it.MsgID)
			for i := range uint64(recentHashes) {
				bit := (h1 + i*h2) % recentBits
				r.cur[bit/64] |= 1 << (bit % 64)
			}
		}
	}
}

// mayHold is false only when id is certainly not among the ids stored in
// the last window.
func (r *recentIDs) mayHold(id string) bool {
	if r == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.now().Sub(r.since) < r.window {
		return true
	}
	r.rotate()
	h1, h2 := r.hashes(id)
	return r.has(r.cur, h1, h2) || r.has(r.prev, h1, h2)
}

func (r *recentIDs) has(bits []uint64, h1, h2 uint64) bool {
	for i := range uint64(recentHashes) {
		bit := (h1 + i*h2) % recentBits
		if bits[bit/64]&(1<<(bit%64)) == 0 {
			return false
		}
	}
	return true
}

func (r *recentIDs) hashes(id string) (uint64, uint64) {
	h := maphash.String(r.seed, id)
	return h, h>>32 | 1
}

// rotate starts a new generation once cur covered a window: prev then
// holds the window before, which ids still in the dedup window may be in.
func (r *recentIDs) rotate() {
	age := r.now().Sub(r.rotated)
	if age < r.window {
		return
	}
	clear(r.prev)
	if age >= 2*r.window {
		clear(r.cur) // nothing in cur is within the window any more
	}
	r.cur, r.prev = r.prev, r.cur
	r.rotated = r.now()
}
