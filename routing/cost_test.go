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

// refusedByTheMeter runs src on in with no deadline and wants the meter
// to refuse it (MaxFilterRunCost), promptly: 15 s is a guard against an
// evaluation that the meter lets run (for half a minute and more), not a
// benchmark (a refusal takes ~2 s under -race alone, and failed the old
// 5 s guard once on two loaded cores).
func refusedByTheMeter(t *testing.T, src string, in Input) {
	t.Helper()
	f, err := CompileFilter(src)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	ctx, cancel := context.WithCancel(context.Background()) // no deadline
	defer cancel()
	type answer struct {
		ok  bool
		err error
	}
	done := make(chan answer, 1)
	go func() {
		ok, err := f.Match(ctx, in)
		done <- answer{ok, err}
	}()
	select {
	case a := <-done:
		var ce *FilterCostError
		if a.ok || !errors.As(a.err, &ce) || ce.Event || ce.Limit != MaxFilterRunCost {
			// %.300v: an error may quote a huge operand.
			t.Errorf("%s = %v, %.300v; want it past its cost limit of %d", src, a.ok, a.err, MaxFilterRunCost)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("%s still running after 15 s with no deadline: its cost limit did not stop it", src)
	}
}

func zeros(n int) []any {
	l := make([]any, n)
	for i := range l {
		l[i] = float64(0)
	}
	return l
}

// An equality's operands are charged at their full size, elements of
// elements included, whatever made them (here comprehensions), before
// it compares them: two lists of 20k lists of 20k elements are refused,
// not compared for half a minute inside one uninterruptible ==.
func TestFilterCostChargesNestedOperandsBeforeComparing(t *testing.T) {
	for _, src := range []string{
		`data.items.map(i, data.items) == data.items.map(i, data.items)`,
		`data.items.map(i, data.items) != data.items.map(i, data.items)`,
		`data.items in data.items.map(i, data.items)`,
	} {
		refusedByTheMeter(t, src, Input{Data: map[string]any{"items": zeros(20_000)}})
		f, err := CompileFilter(src)
		if err != nil {
			t.Fatal(err)
		}
		want := !strings.Contains(src, "!=")
		if ok, err := f.Match(context.Background(), Input{Data: map[string]any{"items": zeros(30)}}); ok != want || err != nil {
			t.Errorf("%s on 30 items = %v, %v; want %v", src, ok, err, want)
		}
	}
}

// List literals compared are charged their elements: [data.a] == [data.b]
// with lists of 30k elements that differ in their last costs 60k units,
// not the 1 of a comparison of one-element lists.
func TestFilterCostChargesListLiteralOperands(t *testing.T) {
	a, b := zeros(30_000), zeros(30_000)
	b[len(b)-1] = float64(1)
	for _, src := range []string{
		`data.items.exists(i, [data.a] == [data.b])`,
		`data.items.exists(i, {"k": data.a} == {"k": data.b})`,
	} {
		refusedByTheMeter(t, src, Input{Data: map[string]any{"items": zeros(20_000), "a": a, "b": b}})
		f, err := CompileFilter(src)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := f.Match(context.Background(), Input{Data: map[string]any{"items": zeros(3), "a": zeros(3), "b": zeros(3)}}); !ok || err != nil {
			t.Errorf("%s on short lists = %v, %v; want a match", src, ok, err)
		}
	}
}

// A map literal hashes each key it is made with: {data.big: 1} with a
// 128 KB key in each of 60k steps ran 460 ms within the limit; it is
// refused, and the same filter on a short key still matches.
func TestFilterCostChargesMapLiteralKeys(t *testing.T) {
	const src = `data.items.all(i, {data.big: 1}[data.big] == 1)`
	refusedByTheMeter(t, src, Input{Data: map[string]any{"items": zeros(60_000), "big": strings.Repeat("x", 128<<10)}})
	f, err := CompileFilter(src)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := f.Match(context.Background(), Input{Data: map[string]any{"items": zeros(3), "big": "k"}}); !ok || err != nil {
		t.Errorf("%s on a short key = %v, %v; want a match", src, ok, err)
	}
}

// matches() costs its input's bytes times its program's size: a
// 402-instruction regex over a 4 KB string takes milliseconds, and 3000
// of them are refused rather than run for 20 s.
func TestFilterCostWeighsRegexesByTheirProgram(t *testing.T) {
	const src = `data.items.exists(i, data.s.matches('a{200}b{200}'))`
	in := Input{Data: map[string]any{"items": zeros(3000), "s": strings.Repeat("a", MaxRegexInput)}}
	refusedByTheMeter(t, src, in)
	f, err := CompileFilter(src)
	if err != nil {
		t.Fatal(err)
	}
	in.Data = map[string]any{"items": zeros(3), "s": strings.Repeat("a", 200) + strings.Repeat("b", 200)}
	if ok, err := f.Match(context.Background(), in); !ok || err != nil {
		t.Errorf("%s on a short string = %v, %v; want a match", src, ok, err)
	}
}

// Every operation's string operands are charged, conversions included:
// double(), int(), uint() of a 1 MB string in
// each of 50k steps are refused, not run for tens of seconds.
func TestFilterCostChargesConversionsOfStrings(t *testing.T) {
	big := strings.Repeat("1", 1<<20)
	for _, src := range []string{
		`data.items.exists(i, double(data.big) == 0.5)`,
		`data.items.exists(i, int(data.big) == 1)`,
		`data.items.exists(i, uint(data.big) == 1u)`,
	} {
		refusedByTheMeter(t, src, Input{Data: map[string]any{"items": zeros(50_000), "big": big}})
	}
	// timestamp() and duration() in a comprehension are past
	// MaxFilterCost; one call on a string of more than ten times
	// MaxFilterRunCost bytes is refused before it parses it.
	huge := strings.Repeat("1", 11*MaxFilterRunCost)
	for _, src := range []string{
		`timestamp(data.big) > timestamp(0)`,
		`duration(data.big) > duration('0s')`,
		`double(data.big) > 0.0`,
	} {
		refusedByTheMeter(t, src, Input{Data: map[string]any{"big": huge}})
	}
	// Ordinary conversions are cheap, and still answer.
	f, err := CompileFilter(`int(data.n) == 12 && duration(data.d) == duration('1s') && timestamp(data.t) > timestamp(0)`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := f.Match(context.Background(), Input{Data: map[string]any{"n": "12", "d": "1s", "t": "2026-01-01T00:00:00Z"}}); !ok || err != nil {
		t.Errorf("conversions of short strings = %v, %v; want a match", ok, err)
	}
}

// Operands that are attributes stay attributes: an index or a field
// after them still applies.
func TestFilterCostOperandsKeepTheirQualifiers(t *testing.T) {
	in := Input{Data: map[string]any{"m": map[string]any{"k": "value"}, "key": "k", "l": []any{"a", "b"}}}
	for _, src := range []string{
		`data.m[data.key] == "value"`,
		`data.m[data.key].contains("alu")`,
		`size(data.m[data.key]) == 5`,
		`data.m.k.startsWith("va") && data.l[1].endsWith("b")`,
		`"b" in data.l && "k" in data.m && !("x" in data.m)`,
		`string(data.m[data.key]) + data.l[0] == "valuea"`,
	} {
		f, err := CompileFilter(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if ok, err := f.Match(context.Background(), in); !ok || err != nil {
			t.Errorf("%s = %v, %v; want a match", src, ok, err)
		}
	}
}

// BenchmarkMatchOrdinary is ordinary filters on a small event: the
// meter must keep them cheap.
func BenchmarkMatchOrdinary(b *testing.B) {
	in := items(100)
	in.Type = "invoice.paid"
	in.Data.(map[string]any)["s"] = "ord_12345"
	for _, src := range []string{
		`type == "invoice.paid" && data.s != ""`,
		`data.items.exists(i, i.id == 99.0)`,
		`data.s.startsWith("ord_") && data.s.matches('^ord_[0-9]+$')`,
		`data.items.map(i, i.id).size() == 100`,
	} {
		f, err := CompileFilter(src)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(src, func(b *testing.B) {
			for b.Loop() {
				if ok, err := f.Match(context.Background(), in); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// matches() refuses an input past MaxRegexInput without reading it: a
// long string under a large pattern is that filter's error (no match,
// the event stored), not a cost that refuses the publish.
func TestRegexPastItsInputBoundIsNotACost(t *testing.T) {
	f, err := CompileFilter(`data.s.matches('a{200}b{200}')`)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := f.Match(context.Background(), Input{Data: map[string]any{"s": strings.Repeat("a", 50_000)}})
	var cost *FilterCostError
	if ok || err == nil || errors.As(err, &cost) || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("a 50 KB string under a 402-instruction pattern = %v, %v; want the input bound's error, not a cost", ok, err)
	}
}
