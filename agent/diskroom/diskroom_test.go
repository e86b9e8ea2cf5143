package diskroom_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/agent/diskroom"
	"github.com/rivora/rivora/internal/errkind"
)

const mib = 1 << 20

// fakeStore is a store's room and pending events as a test sets them.
type fakeStore struct {
	room    int64
	err     error
	pending map[string]int
}

func (f *fakeStore) watch(minFree int64) *diskroom.Watch {
	return diskroom.New(diskroom.Config{Dir: "/data", MinFree: minFree, Room: func() (int64, error) { return f.room, f.err },
		Pending: func() (map[string]int, int) {
			total := 0
			for _, n := range f.pending {
				total += n
			}
			return f.pending, total
		}, Log: slog.New(slog.DiscardHandler)})
}

// refusedBy is the DiskLowReason detail of a refusal (nil: err is nil),
// which must be back-pressure.
func refusedBy(t *testing.T, err error) map[string]string {
	t.Helper()
	if err == nil {
		return nil
	}
	if code := errkind.CodeOf(err); code != connect.CodeResourceExhausted {
		t.Fatalf("refusal %v has code %v, want resource_exhausted (back-pressure)", err, code)
	}
	md, ok := errkind.Info(errkind.AsConnect(err), diskroom.DiskLowReason)
	if !ok {
		t.Fatalf("refusal %v carries no %s detail", err, diskroom.DiskLowReason)
	}
	return md
}

// With room, every event is taken; low, only the events of customers
// holding a quarter or more of the pending ones are refused; full, every
// event is, and re-ingests too.
func TestLevels(t *testing.T) {
	store := &fakeStore{room: 100 * mib, pending: map[string]int{"flood": 900, "small": 60, "tiny": 40}}
	w := store.watch(10 * mib)
	for _, c := range []string{"flood", "small"} {
		if err := w.Admit(c); err != nil {
			t.Fatalf("with room: customer %s refused: %v", c, err)
		}
	}

	store.room = 15 * mib
	w = store.watch(10 * mib)
	if level, room := w.Level(); level != diskroom.Low || room != 15*mib {
		t.Fatalf("at 15 MiB of room, min 10 MiB: level %v room %d, want low", level, room)
	}
	md := refusedBy(t, w.Admit("flood"))
	if md == nil || md["customer"] != "flood" || md["room_bytes"] != "15728640" {
		t.Fatalf("low: the heavy customer's event is refused with %v, want its customer and the room in the detail", md)
	}
	err := w.Admit("flood")
	for _, want := range []string{"15.0 MiB left", "under twice --min-free-disk 10.0 MiB", `customer "flood" holds 900 of the 1000 events pending in the cell`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("low refusal %q does not say %q", err, want)
		}
	}
	for _, c := range []string{"small", "tiny", "new"} {
		if err := w.Admit(c); err != nil {
			t.Errorf("low: customer %s, holding under a quarter of the pending events, refused: %v", c, err)
		}
	}
	if err := w.AdmitAny(); err != nil {
		t.Errorf("low: a re-ingest refused: %v", err)
	}

	store.room = 9 * mib
	w = store.watch(10 * mib)
	for _, c := range []string{"flood", "small", "new"} {
		if md := refusedBy(t, w.Admit(c)); md == nil || md["customer"] != "" {
			t.Errorf("full: customer %s's event: refusal detail %v, want one naming no customer", c, md)
		}
	}
	if refusedBy(t, w.AdmitAny()) == nil {
		t.Error("full: a re-ingest was taken")
	}
	if err := w.Admit("new"); !strings.Contains(err.Error(), "--history-retention") {
		t.Errorf("full refusal %q does not say how room comes back", err)
	}
}

// A level is left only with a tenth of MinFree more room than it was
// entered at, so it does not flap at its edge.
func TestLevelsDoNotFlap(t *testing.T) {
	store := &fakeStore{room: 9 * mib}
	w := store.watch(10 * mib)
	run := func(room int64) diskroom.Level {
		store.room = room
		diskroom.Look(w)
		level, _ := w.Level()
		return level
	}
	for _, step := range []struct {
		room int64
		want diskroom.Level
	}{
		{9 * mib, diskroom.Full},
		{10*mib + mib/2, diskroom.Full}, // over MinFree, within the margin
		{11*mib + 1, diskroom.Low},
		{19 * mib, diskroom.Low},
		{20*mib + mib/2, diskroom.Low}, // over twice MinFree, within the margin
		{21*mib + 1, diskroom.Roomy},
		{20*mib - 1, diskroom.Low},
	} {
		if got := run(step.room); got != step.want {
			t.Fatalf("at %d bytes of room: level %v, want %v", step.room, got, step.want)
		}
	}
}

// A store whose room cannot be read takes events as if it had some: the
// watch must not stop ingest on a failing statfs.
func TestUnreadableRoomTakesEvents(t *testing.T) {
	store := &fakeStore{err: errors.New("statfs: input/output error")}
	w := store.watch(10 * mib)
	if err := w.Admit("flood"); err != nil {
		t.Fatalf("unreadable room: event refused: %v", err)
	}
}
