package routing

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// items is data with n items and a short string s.
func items(n int) Input {
	list := make([]any, n)
	for i := range list {
		list[i] = map[string]any{"id": float64(i)}
	}
	return Input{Data: map[string]any{"items": list, "s": "x"}}
}

// A filter's cost on an event is counted, not timed: one past
// MaxFilterRunCost on an event's data stops with a FilterCostError
// however much time it is given, every time, and the same filter on a
// smaller event answers.
func TestFilterCostLimitIsTheSameWhateverTheTime(t *testing.T) {
	f, err := CompileFilter(`data.items.map(i, data.s).size() > 5`)
	if err != nil {
		t.Fatal(err)
	}
	big := items(120_000)
	// No deadline, then an hour: the machine may be as slow as it likes.
	for _, budget := range []time.Duration{0, time.Hour} {
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if budget > 0 {
			ctx, cancel = context.WithTimeout(ctx, budget)
		}
		ok, err := f.Match(ctx, big)
		var ce *FilterCostError
		if ok || !errors.As(err, &ce) || ce.Event || ce.Limit != MaxFilterRunCost || !OverCost(err) || MissingField(err) {
			t.Fatalf("map over 120k items given %s = %v, %v; want no answer: past its cost limit of %d", budget, ok, err, MaxFilterRunCost)
		}
		cancel()
	}
	if ok, err := f.Match(context.Background(), items(10_000)); !ok || err != nil {
		t.Fatalf("map over 10k items = %v, %v; want a match", ok, err)
	}
}

// One event's filters share MaxEventFilterCost: filters each within
// their own limit stop, past the event's, in the filter that reaches it.
func TestEventFiltersShareACostLimit(t *testing.T) {
	f, err := CompileFilter(`data.items.exists(i, i.id < 0)`)
	if err != nil {
		t.Fatal(err)
	}
	in := items(60_000) // 12 units per item: 720k of the filter's 1M
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	ctx = context.WithValue(ctx, eventMeterKey{}, &eventMeter{})
	for i := range 2 {
		if ok, err := f.Match(ctx, in); ok || err != nil {
			t.Fatalf("filter %d of the event = %v, %v; want no match within the limits", i+1, ok, err)
		}
	}
	ok, err := f.Match(ctx, in)
	var ce *FilterCostError
	if ok || !errors.As(err, &ce) || !ce.Event || ce.Limit >= MaxFilterRunCost || !strings.Contains(err.Error(), "together") {
		t.Fatalf("third filter of the event = %v, %v; want it past the event's cost limit", ok, err)
	}
	// Another event starts afresh.
	ctx2, cancel2 := FilterContext(context.Background())
	defer cancel2()
	if ok, err := f.Match(ctx2, in); ok || err != nil {
		t.Fatalf("the filter on another event = %v, %v; want no match within the limits", ok, err)
	}
}

// An operation whose work grows with its operands costs their size: a
// few comprehension steps, each reading a large string, go past the limit
// that counting steps alone would not.
func TestFilterCostCountsOperandSizes(t *testing.T) {
	big := strings.Repeat("a", 200<<10)
	steps := make([]string, 100)
	for i := range steps {
		steps[i] = strconv.Itoa(i)
	}
	hundred := "[" + strings.Join(steps, ",") + "]"
	for _, src := range []string{
		hundred + `.exists(i, data.big.contains("b"))`,
		hundred + `.exists(i, data.big == data.other)`,
		hundred + `.exists(i, data.big > data.other)`,
		hundred + `.exists(i, (data.big + "b").size() == 0)`,
	} {
		f, err := CompileFilter(src)
		src = strings.Replace(src, hundred, "[0, …, 99]", 1)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		in := Input{Data: map[string]any{"big": big, "other": big + "c"}}
		if ok, err := f.Match(context.Background(), in); ok || !OverCost(err) {
			t.Errorf("%s over a %d-byte string 100 times = %v, %v; want it past its cost limit", src, len(big), ok, err)
		}
		in.Data = map[string]any{"big": "a", "other": "ac"}
		if ok, err := f.Match(context.Background(), in); ok || err != nil {
			t.Errorf("%s over a short string = %v, %v; want no match", src, ok, err)
		}
	}
}
