// Package diskroom keeps an agent's store from filling up. Its room is
// the free disk of the data directory, or what JetStream's own store
// limit leaves if that is less (three quarters of the disk free when the
// server started, unless configured). Past that limit every write is
// refused, whoever's; on a full disk the embedded NATS server turns
// JetStream off for good and the agent must stop
// (natsd.ErrJetStreamDisabled); either way one customer's flood stops
// every customer's events. So the ingest gateway asks Watch before it
// stores events, and Watch, looking every second, answers:
//
//   - with room (at least twice MinFree): every event is taken;
//   - low (under twice MinFree): the events of each customer holding a
//     quarter or more of the pending events (the cell's: see Cell) are
//     refused, so one customer's flood stops first and the others'
//     events still go in;
//   - full (under MinFree): every event is refused.
//
// A refusal is back-pressure (resource_exhausted, ErrorInfo DiskLowReason):
// deliveries go on, draining what is pending; room comes back as the
// history's retention lets delivered events go (the history keeps each
// delivered event whole for --history-retention) or the disk is freed. A
// level is left only with a tenth of MinFree more room than it took, so
// that it does not flap at its edge.
package diskroom

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/rivora/rivora/internal/bytesize"
	"github.com/rivora/rivora/internal/errkind"
)

// DiskLowReason is the ErrorInfo reason (errkind.Domain) of a publish
// refused for the agent's store: its metadata's "room_bytes" is the room
// left (Config.Room), "customer" the customer refused when only its
// events are.
const DiskLowReason = "DISK_LOW"

// DefaultMinFreeCap bounds the default MinFree (DefaultMinFree).
const DefaultMinFreeCap = 256 << 20

// DefaultMinFree is MinFree when none is given: a tenth of what the
// store may hold in all (its capacity), at most DefaultMinFreeCap.
func DefaultMinFree(capacity int64) int64 { return min(capacity/10, DefaultMinFreeCap) }

// Level is how much room the disk has.
type Level int

// The levels, from most room to least.
const (
	Roomy Level = iota
	Low
	Full
)

func (l Level) String() string {
	switch l {
	case Low:
		return "low"
	case Full:
		return "full"
	}
	return "roomy"
}

// Config is what Watch needs.
type Config struct {
	// Dir is the data directory.
	Dir string
	// MinFree is the free disk under which every event is refused; under
	// twice it, the events of the customers holding most pending events.
	MinFree int64
	// Room tells how many more bytes the store can take: the free disk
	// of Dir's filesystem, or what the store's own limit leaves, if less
	// (natsd.Server.StoreRoom).
	Room func() (int64, error)
	// Pending tells the events pending, by customer and in all: the
	// cell's (Cell.Pending), or this agent's alone.
	Pending func() (byCustomer map[string]int, total int)
	Log     *slog.Logger
}

// Watch is the disk's room, looked at every second by Run.
type Watch struct {
	cfg   Config
	state atomic.Pointer[state]
}

type state struct {
	level Level
	free  int64
	// heavy are the customers refused while low, with their pending
	// events, of total.
	heavy map[string]int
	total int
	// unreadable: the last look could not read the room (logged once).
	unreadable bool
}

// New returns a watch that has looked once.
func New(cfg Config) *Watch {
	w := &Watch{cfg: cfg}
	w.state.Store(&state{})
	w.look()
	return w
}

// Run looks at the disk every second until ctx ends.
func (w *Watch) Run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			w.look()
		}
	}
}

// look reads the free disk and decides the level, and while low, who is
// refused.
func (w *Watch) look() {
	prev := w.state.Load()
	free, err := w.cfg.Room()
	if err != nil {
		if !prev.unreadable {
			w.cfg.Log.Warn("cannot read the store's room; events are taken as if it had some until it can be read", "dir", w.cfg.Dir, "error", err)
		}
		w.state.Store(&state{unreadable: true})
		return
	}
	if prev.unreadable {
		w.cfg.Log.Info("the store's room can be read again", "dir", w.cfg.Dir, "room_bytes", free)
	}
	next := &state{level: w.levelAt(free, prev.level), free: free}
	if next.level == Low {
		next.heavy, next.total = heavyCustomers(w.cfg.Pending())
	}
	w.state.Store(next)
	if next.level != prev.level {
		log := w.cfg.Log.Warn
		if next.level < prev.level {
			log = w.cfg.Log.Info
		}
		log("the store's room changed", "level", next.level.String(), "was", prev.level.String(), "room_bytes", free, "min_free_bytes", w.cfg.MinFree, "refused_customers", len(next.heavy))
	}
}

// levelAt is the level at free bytes, from level prev: a level is left
// only with a tenth of MinFree more room than it was entered at.
func (w *Watch) levelAt(free int64, prev Level) Level {
	margin := w.cfg.MinFree / 10
	full, low := w.cfg.MinFree, 2*w.cfg.MinFree
	if prev == Full {
		full += margin
	}
	if prev >= Low {
		low += margin
	}
	switch {
	case free < full:
		return Full
	case free < low:
		return Low
	}
	return Roomy
}

// heavyCustomers are those holding a quarter or more of total.
func heavyCustomers(pending map[string]int, total int) (map[string]int, int) {
	heavy := map[string]int{}
	for c, n := range pending {
		if n > 0 && 4*n >= total {
			heavy[c] = n
		}
	}
	return heavy, total
}

// Admit refuses an event of customer when the disk is full, or low and
// customer holds a quarter or more of this agent's pending events.
func (w *Watch) Admit(customer string) error {
	st := w.state.Load()
	switch st.level {
	case Full:
		return w.full(st)
	case Low:
		if n, heavy := st.heavy[customer]; heavy {
			err := errkind.Errorf(errkind.Exhausted, "this agent's store is low on room (%s left, under twice --min-free-disk %s) and customer %q holds %d of the %d events pending in the cell: that customer's events are refused until they drain or room comes back; retry later",
				bytesize.IEC(st.free), bytesize.IEC(w.cfg.MinFree), customer, n, st.total)
			return errkind.WithInfo(err, DiskLowReason, map[string]string{"room_bytes": fmt.Sprint(st.free), "customer": customer})
		}
	}
	return nil
}

// AdmitAny refuses what re-ingests events (a replay, a resend) when the
// disk is full.
func (w *Watch) AdmitAny() error {
	if st := w.state.Load(); st.level == Full {
		return w.full(st)
	}
	return nil
}

func (w *Watch) full(st *state) error {
	err := errkind.Errorf(errkind.Exhausted, "this agent's store is nearly full (%s of room left, under --min-free-disk %s): it takes no events until room comes back (its pending events still go out, and delivered ones leave the disk as --history-retention lets them go); retry later",
		bytesize.IEC(st.free), bytesize.IEC(w.cfg.MinFree))
	return errkind.WithInfo(err, DiskLowReason, map[string]string{"room_bytes": fmt.Sprint(st.free)})
}

// Level is the disk's level and free bytes at the last look.
func (w *Watch) Level() (Level, int64) {
	st := w.state.Load()
	return st.level, st.free
}
