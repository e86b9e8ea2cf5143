package heldtime_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/heldtime"
	"github.com/rivora/rivora/agent/retry"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// What a run notes is what the next run recalls: each kind apart, the
// generation with the stretches; a destination noted with no
// stretches, forgotten or not retained is not recalled. A stretch open
// at the stop is recalled closed where the agent was last seen running
// (here never noted alive: where it opened), plus AliveEvery.
func TestTheNextRunRecallsTheStretches(t *testing.T) {
	dir := t.TempDir()
	b, err := heldtime.Open(dir, t0.Add(24*time.Hour))
	if err != nil || len(b.Recalled(heldtime.Destination)) != 0 {
		t.Fatalf("a data dir without the file: %v, %v; want an empty book", b.Recalled(heldtime.Destination), err)
	}
	closed := retry.Pauses{{Start: t0, End: t0.Add(time.Hour)}}
	open := retry.Pauses{{Start: t0, End: t0.Add(time.Minute)}, {Start: t0.Add(2 * time.Hour)}}
	b.Note(heldtime.Destination, "orders", 3, closed)
	b.Note(heldtime.Destination, "billing", 0, open)
	b.Note(heldtime.Destination, "mended", 1, closed)
	b.Note(heldtime.Destination, "mended", 1, nil)
	b.Note(heldtime.Destination, "gone", 1, closed)
	b.Forget(heldtime.Destination, "gone")
	b.Note(heldtime.Destination, "dropped", 1, closed)
	b.Retain(heldtime.Destination, func(id string) bool { return id != "dropped" })
	b.Note(heldtime.Subscription, "sub_a", 0, open)
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}

	next, err := heldtime.Open(dir, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	closedAtStop := retry.Pauses{open[0], {Start: open[1].Start, End: open[1].Start.Add(heldtime.AliveEvery)}}
	dests := next.Recalled(heldtime.Destination)
	if len(dests) != 2 || dests["orders"].Generation != 3 || !equal(dests["orders"].Stretches, closed) || !equal(dests["billing"].Stretches, closedAtStop) {
		t.Fatalf("recalled destinations %+v; want orders (generation 3, %v) and billing (%v)", dests, closed, closedAtStop)
	}
	if subs := next.Recalled(heldtime.Subscription); len(subs) != 1 || !equal(subs["sub_a"].Stretches, closedAtStop) {
		t.Fatalf("recalled subscriptions %+v; want sub_a's", subs)
	}
}

// A stretch open at the stop ends where the agent last noted it was
// running, plus AliveEvery; at the latest when the agent starts again
// (a restart within AliveEvery). Alive notes nothing while no stretch
// is open.
func TestAnOpenStretchEndsWhereTheAgentWasLastSeen(t *testing.T) {
	dir := t.TempDir()
	b, _ := heldtime.Open(dir, t0)
	b.Alive(t0.Add(time.Minute))
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, heldtime.FileName)); !os.IsNotExist(err) {
		t.Fatalf("Alive with no stretch open wrote the book (%v)", err)
	}
	b.Note(heldtime.Destination, "orders", 1, retry.Pauses{{Start: t0}})
	lastSeen := t0.Add(3 * time.Hour)
	b.Alive(lastSeen)
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		restart, end time.Time
	}{
		{restart: t0.Add(48 * time.Hour), end: lastSeen.Add(heldtime.AliveEvery)},
		{restart: lastSeen.Add(time.Second), end: lastSeen.Add(time.Second)},
	} {
		next, err := heldtime.Open(dir, c.restart)
		if err != nil {
			t.Fatal(err)
		}
		got := next.Recalled(heldtime.Destination)["orders"].Stretches
		if want := (retry.Pauses{{Start: t0, End: c.end}}); !equal(got, want) {
			t.Errorf("restarted at %v: recalled %v, want %v", c.restart, got, want)
		}
	}
}

// Stretches that are not as the registries make them (edited by hand,
// another version's) are dropped, the others kept.
func TestStretchesOutOfOrderAreDropped(t *testing.T) {
	dir := t.TempDir()
	h := func(stretches string) string { return `{"generation": 1, "stretches": ` + stretches + `}` }
	at := func(m int) string { return `"` + t0.Add(time.Duration(m)*time.Minute).Format(time.RFC3339) + `"` }
	file := `{"destinations": {` +
		`"good": ` + h(`[{"Start": `+at(0)+`, "End": `+at(5)+`}]`) + `, ` +
		`"reversed": ` + h(`[{"Start": `+at(5)+`, "End": `+at(0)+`}]`) + `, ` +
		`"open_first": ` + h(`[{"Start": `+at(0)+`}, {"Start": `+at(5)+`, "End": `+at(6)+`}]`) + `, ` +
		`"overlapping": ` + h(`[{"Start": `+at(0)+`, "End": `+at(5)+`}, {"Start": `+at(3)+`, "End": `+at(6)+`}]`) + `, ` +
		`"empty": ` + h(`[]`) + `}}`
	if err := os.WriteFile(filepath.Join(dir, heldtime.FileName), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := heldtime.Open(dir, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Recalled(heldtime.Destination); len(got) != 1 || len(got["good"].Stretches) != 1 {
		t.Fatalf("recalled %+v, want good's only", got)
	}
}

// A book with nothing new is not written again; one with a change is.
func TestSaveWritesOnlyAChange(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, heldtime.FileName)
	b, _ := heldtime.Open(dir, t0.Add(24*time.Hour))
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("an empty, unchanged book wrote its file (%v)", err)
	}
	stretches := retry.Pauses{{Start: t0.Add(time.Second)}}
	b.Note(heldtime.Destination, "orders", 1, stretches)
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// The same stretches, as the registry holds them again (another
	// value, its time in another location): no change.
	b.Note(heldtime.Destination, "orders", 1, retry.Pauses{{Start: t0.Add(time.Second).Local()}})
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a book noted the same stretches wrote its file again (%v)", err)
	}
	b.Note(heldtime.Destination, "orders", 1, retry.Pauses{{Start: t0.Add(time.Second), End: t0.Add(time.Hour)}})
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("a changed stretch was not written: %v", err)
	}
}

// A corrupt file does not stop the agent: the book is empty, the error
// names the file, and the next change writes a good one.
func TestACorruptFileIsAnEmptyBook(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, heldtime.FileName)
	if err := os.WriteFile(path, []byte(`{"destinations": {"orders": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := heldtime.Open(dir, t0.Add(24*time.Hour))
	if err == nil || !strings.Contains(err.Error(), path) || len(b.Recalled(heldtime.Destination)) != 0 {
		t.Fatalf("Open of a corrupt file: %v, %v; want an empty book and an error naming the file", b.Recalled(heldtime.Destination), err)
	}
	b.Note(heldtime.Destination, "orders", 1, retry.Pauses{{Start: t0}})
	if err := b.Save(); err != nil {
		t.Fatal(err)
	}
	if again, err := heldtime.Open(dir, t0.Add(24*time.Hour)); err != nil || len(again.Recalled(heldtime.Destination)) != 1 {
		t.Fatalf("after a save over the corrupt file: %v, %v", again.Recalled(heldtime.Destination), err)
	}
}

func equal(a, b retry.Pauses) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Start.Equal(b[i].Start) || !a[i].End.Equal(b[i].End) {
			return false
		}
	}
	return true
}
