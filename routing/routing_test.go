package routing

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"regexp/syntax"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestTypeMatches(t *testing.T) {
	cases := []struct {
		patterns []string
		typ      string
		want     bool
	}{
		{[]string{"order.*"}, "order.created", true},
		{[]string{"order.*"}, "order.", true},
		{[]string{"order.*"}, "orders.created", false},
		{[]string{"order.created"}, "order.created", true},
		{[]string{"order.created"}, "order.updated", false},
		{[]string{"*"}, "anything.at.all", true},
		{[]string{"*.paid"}, "invoice.paid", true},
		{[]string{"*.paid"}, "invoice.paid.late", false},
		{[]string{"a*b*c"}, "aXXbYYc", true},
		{[]string{"a*b*c"}, "aXXcYYb", false},
		{[]string{"order.created", "invoice.*"}, "invoice.paid", true},
		{nil, "order.created", false},
	}
	for _, c := range cases {
		if got := TypeMatches(c.patterns, c.typ); got != c.want {
			t.Errorf("TypeMatches(%q, %q) = %v, want %v", c.patterns, c.typ, got, c.want)
		}
	}
}

func TestValidatePatterns(t *testing.T) {
	for _, bad := range [][]string{nil, {""}, {"order created"}, {"a", "a"}, {strings.Repeat("x", MaxTypeLen+1)}} {
		if err := ValidatePatterns(bad); err == nil {
			t.Errorf("ValidatePatterns(%q) accepted", bad)
		}
	}
	if err := ValidatePatterns([]string{"order.*", "invoice.paid", "*"}); err != nil {
		t.Fatal(err)
	}
}

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestFilterMatches(t *testing.T) {
	f, err := CompileFilter(`data.amount > 100 && type != "order.test"`)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		data, typ string
		want      bool
	}{
		{`{"amount": 150}`, "order.created", true},
		{`{"amount": 50}`, "order.created", false},
		{`{"amount": 150}`, "order.test", false},
		{`{"other": 1}`, "order.created", false},       // missing field: no match
		{`{"amount": "lots"}`, "order.created", false}, // wrong type: no match
		{`[1, 2]`, "order.created", false},
	}
	for _, c := range cases {
		got, _ := f.Match(context.Background(), Input{Data: decode(t, c.data), Type: c.typ, Customer: "c1", Lane: "u1"})
		if got != c.want {
			t.Errorf("%s %s: match %v, want %v", c.data, c.typ, got, c.want)
		}
	}
	g, err := CompileFilter(`customer == "c1" && lane.startsWith("vip-")`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := g.Match(context.Background(), Input{Customer: "c1", Lane: "vip-7"}); !ok || err != nil {
		t.Fatalf("customer/lane filter: %v %v", ok, err)
	}
}

func TestFilterRefused(t *testing.T) {
	for src, want := range map[string]string{
		`data.amount >`:                     "does not compile",
		`data.amount + 1`:                   "boolean",
		`data.flag`:                         "", // dyn: accepted, a non-boolean result is no match
		`"text"`:                            "boolean",
		`1 + 2`:                             "boolean",
		`nosuchvar > 1`:                     "does not compile",
		strings.Repeat("x", MaxFilterLen+1): "limit",
		`data.a.all(x, data.b.all(y, data.c.all(z, x == y && y == z)))`: "cost",
		`lane.matches("[")`:                 "invalid matches argument",
		`data.s.matches(data.re)`:           "literal pattern",
		`matches(lane, type)`:               "literal pattern",
		`data.s.matches("a{1000}a{1000}b")`: "instructions",
		`data.s.matches("^ord_[0-9]+$")`:    "",
		`data.s.matches("a{600}b")`:         "instructions",
		strings.Repeat(`lane.matches("a") || `, MaxRegexCalls) + `lane.matches("b")`: "matches() calls",
		`data.at < timestamp("yesterday")`:                                           "invalid timestamp",
	} {
		_, err := CompileFilter(src)
		switch {
		case want == "" && err != nil:
			t.Errorf("CompileFilter(%.40q): %v", src, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("CompileFilter(%.40q) = %v, want an error with %q", src, err, want)
		}
	}
	f, err := CompileFilter(`data.flag`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := f.Match(context.Background(), Input{Data: decode(t, `{"flag": 1}`)}); ok {
		t.Fatal("a non-boolean result matched")
	}
}

// A regex literal that does not parse is refused in either form of
// matches(), with the same words and a caret under the pattern: the
// function form's was accepted (CEL's validator reads the call's first
// argument, the pattern only in the method form), and the filter never
// matched. A stored one still loads (LoadFilter): it was let through.
func TestFilterBadRegexRefusedInBothForms(t *testing.T) {
	const why = "invalid matches argument: \"[\" is not a regular expression (missing closing ]: `[`)"
	for _, tc := range []struct{ src, caret string }{
		{`data.s.matches("[")`, "    data.s.matches(\"[\")\n                   ^"},
		{`matches(data.s, "[")`, "    matches(data.s, \"[\")\n                    ^"},
		{`lane == "x" || matches(lane, "a(")`, "^"},
	} {
		_, err := CompileFilter(tc.src)
		if err == nil || !strings.Contains(err.Error(), "filter does not compile at column") || !strings.Contains(err.Error(), tc.caret) {
			t.Errorf("CompileFilter(%s) = %v, want refused with the caret under the pattern:\n%s", tc.src, err, tc.caret)
			continue
		}
		if !strings.Contains(err.Error(), "invalid matches argument") || !strings.Contains(err.Error(), "is not a regular expression") {
			t.Errorf("CompileFilter(%s) = %v, want it to say the pattern is not a regular expression", tc.src, err)
		}
		if strings.Contains(tc.src, `"["`) && !strings.Contains(err.Error(), why) {
			t.Errorf("CompileFilter(%s) = %v, want %q", tc.src, err, why)
		}
	}
	if _, err := LoadFilter(`matches(data.s, "[")`); err != nil {
		t.Errorf("LoadFilter of a stored function-form bad regex: %v, want it loaded as before", err)
	}
}

// A filter stops when its context ends, even inside a comprehension over
// a large list (the budget bounds what the cost estimate cannot: data
// with far more elements than it assumes), and does not match.
func TestFilterStopsWhenItsContextEnds(t *testing.T) {
	f, err := CompileFilter(`data.items.exists(i, i == "z")`)
	if err != nil {
		t.Fatal(err)
	}
	items := make([]any, 1_000_000)
	for i := range items {
		items[i] = float64(1)
	}
	in := Input{Data: map[string]any{"items": items}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ok, err := f.Match(ctx, in); ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("Match with an ended context = %v, %v; want no match and its end", ok, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Microsecond)
	defer cancel()
	if ok, err := f.Match(ctx, in); ok || !errors.Is(err, context.DeadlineExceeded) || MissingField(err) {
		t.Fatalf("Match of a million items within a microsecond = %v, %v; want it stopped (deadline exceeded)", ok, err)
	}
	small := Input{Data: map[string]any{"items": []any{float64(1), "z"}}}
	ctx, cancel = FilterContext(context.Background())
	defer cancel()
	if ok, err := f.Match(ctx, small); !ok || err != nil {
		t.Fatalf("Match of two items within the event's budget = %v, %v; want a match", ok, err)
	}
}

// matches() reads strings of at most MaxRegexInput bytes, in either form:
// a longer one is an error (counted, not a missing field) and no match,
// whatever the pattern, so no regex runs over a payload-sized string.
func TestFilterRegexReadsBoundedStrings(t *testing.T) {
	for _, src := range []string{`data.s.matches("^ord_[0-9]+$")`, `matches(data.s, "^ord_[0-9]+$")`} {
		f, err := CompileFilter(src)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := f.Match(context.Background(), Input{Data: map[string]any{"s": "ord_42"}}); !ok || err != nil {
			t.Fatalf("%s on ord_42 = %v, %v; want a match", src, ok, err)
		}
		long := "ord_" + strings.Repeat("1", MaxRegexInput)
		if ok, err := f.Match(context.Background(), Input{Data: map[string]any{"s": long}}); ok || err == nil || MissingField(err) || !strings.Contains(err.Error(), "at most") {
			t.Fatalf("%s on a %d-byte string = %v, %v; want no match and the bound's error", src, len(long), ok, err)
		}
	}
}

// A field the data lacks is the ordinary way a filter says no; a filter
// that fails for another reason fails whatever the event.
func TestFilterMissingFieldIsNotAFailure(t *testing.T) {
	for src, missing := range map[string]bool{
		`data.amount > 100`:    true,
		`data.order.id == "1"`: true,
		`data.amount / 0 > 1`:  false,
		`data.amount`:          false, // not a boolean
		`data.amount > "x"`:    false, // mismatched types
	} {
		f, err := CompileFilter(src)
		if err != nil {
			t.Fatal(err)
		}
		data := `{"amount": 180}`
		if missing {
			data = `{"other": 1}`
		}
		ok, err := f.Match(context.Background(), Input{Data: decode(t, data)})
		if ok || err == nil || MissingField(err) != missing {
			t.Errorf("%s on %s: match %v, err %v; want no match and an error that is a missing field: %v", src, data, ok, err, missing)
		}
	}
}

func TestSchema(t *testing.T) {
	s, err := CompileSchema(`{"type":"object","required":["amount"],"properties":{"amount":{"type":"number","minimum":0},"items":{"type":"array","items":{"type":"string"}}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate([]byte(`{"amount": 3, "items": ["a"]}`)); err != nil {
		t.Fatal(err)
	}
	for data, want := range map[string]string{
		`{"amount": -1}`:              "data/amount",
		`{}`:                          "required",
		`{"amount": 1, "items": [1]}`: "data/items/0",
		`{"amount": "x"}`:             "data/amount",
		`not json`:                    "not JSON",
	} {
		err := s.Validate([]byte(data))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%s) = %v, want an error with %q", data, err, want)
		}
	}
	for bad, want := range map[string]string{
		`{`:            "not JSON",
		`{"type": 12}`: "schema at /type is not a valid JSON Schema",
		`{"properties": {"amount": {"minimum": "0"}}}`: "schema at /properties/amount/minimum is not a valid JSON Schema",
		`{"$ref": "https://example.com/s.json"}`:       "self-contained",
	} {
		_, err := CompileSchema(bad)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "rivora:///") {
			t.Errorf("CompileSchema(%s) = %v, want an error with %q (and no internal URL)", bad, err, want)
		}
	}
}

// A schema may declare any draft the validator implements with $schema,
// and is validated by that draft's rules (draft-04's exclusiveMaximum is
// a boolean beside maximum; 2020-12's a number); any other $schema (draft-03,
// a custom metaschema, a bare name) is refused, naming the drafts there
// are, not as an "external reference". A metaschema error names the
// draft declared.
func TestSchemaDrafts(t *testing.T) {
	draft4 := `{"$schema":"http://json-schema.org/draft-04/schema#","properties":{"n":{"maximum":5,"exclusiveMaximum":true}}}`
	s, err := CompileSchema(draft4)
	if err != nil {
		t.Fatalf("draft-04 schema: %v", err)
	}
	if err := s.Validate([]byte(`{"n":5}`)); err == nil || !strings.Contains(err.Error(), "exclusiveMaximum") {
		t.Errorf("draft-04's exclusiveMaximum true lets 5 through a maximum of 5: %v", err)
	}
	if err := s.Validate([]byte(`{"n":4}`)); err != nil {
		t.Errorf("draft-04 refuses 4 below an exclusive maximum of 5: %v", err)
	}
	for _, url := range []string{"https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2019-09/schema", "http://json-schema.org/draft-07/schema#",
		"http://json-schema.org/draft-06/schema#", "http://json-schema.org/schema#"} {
		if err := CheckSchema(`{"$schema":"` + url + `","type":"object"}`); err != nil {
			t.Errorf("$schema %s: %v", url, err)
		}
	}
	for _, bad := range []string{`"http://json-schema.org/draft-03/schema#"`, `"https://example.com/my-meta"`, `"draft-04"`, `5`, `"http://json-schema.org/draft-04/schema#/definitions"`} {
		err := CheckSchema(`{"$schema":` + bad + `,"type":"object"}`)
		if err == nil || !strings.Contains(err.Error(), "$schema "+bad) || !strings.Contains(err.Error(), Drafts) || strings.Contains(err.Error(), "external reference") {
			t.Errorf("$schema %s: %v, want it named and refused with the drafts supported", bad, err)
		}
	}
	if _, err := CompileSchema(`{"$schema":"http://json-schema.org/draft-07/schema#","properties":{"n":{"minimum":"x"}}}`); err == nil ||
		!strings.Contains(err.Error(), "is not a valid JSON Schema (draft-07)") {
		t.Errorf("a draft-07 schema's metaschema error: %v, want it to name draft-07", err)
	}
}

// A number rule's refusal writes the numbers as JSON has them: exactly,
// or with an exponent when long. They were doubles in x/text's notation:
// 1e400 "got ∞", 1000001 "got 1.000001×10⁰⁶, want 1×10⁰⁶", and two
// integers past 2^53 the same number twice.
func TestSchemaRefusalWritesNumbersExactly(t *testing.T) {
	for _, tc := range []struct{ schema, data, want string }{
		{`{"maximum":1000000}`, `1000001`, `data: maximum: got 1000001, want 1000000 (rule "maximum")`},
		{`{"maximum":1000000}`, `1e400`, `data: maximum: got 1e+400, want 1000000 (rule "maximum")`},
		{`{"minimum":-1e300}`, `-1e400`, `data: minimum: got -1e+400, want -1e+300 (rule "minimum")`},
		{`{"exclusiveMaximum":12345678901234567890}`, `12345678901234567891`, `data: exclusiveMaximum: got 12345678901234567891, want 12345678901234567890 (rule "exclusiveMaximum")`},
		{`{"minimum":0.5}`, `0.25`, `data: minimum: got 0.25, want 0.5 (rule "minimum")`},
		{`{"multipleOf":0.01}`, `0.001`, `data: multipleOf: got 0.001, want 0.01 (rule "multipleOf")`},
	} {
		s, err := CompileSchema(tc.schema)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate([]byte(tc.data)); err == nil || err.Error() != tc.want {
			t.Errorf("%s against %s: %v, want %q", tc.data, tc.schema, err, tc.want)
		}
	}
}

// A schema with a reference cycle compiles, but every value that reaches
// the cycle is refused: CheckSchema refuses it, naming the cycle, and
// takes a recursive schema whose recursion moves into the data.
func TestCheckSchemaRefusesAReferenceCycle(t *testing.T) {
	for bad, want := range map[string]string{
		`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`: "#/$defs/a → #/$defs/a",
		`{"$ref":"#"}`: "# (the root) → # (the root)",
		`{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}},"properties":{"x":{"$ref":"#/$defs/a"}}}`: "#/$defs/a → #/$defs/a/allOf/0 → #/$defs/b → #/$defs/b/anyOf/0 → #/$defs/a",
		`{"anyOf":[{"type":"string"},{"$ref":"#"}]}`:                                 "reference cycle",
		`{"$defs":{"t":{"if":true,"then":{"$ref":"#/$defs/t"}}},"$ref":"#/$defs/t"}`: "#/$defs/t → #/$defs/t/then → #/$defs/t",
	} {
		s, err := CompileSchema(bad)
		if err != nil {
			t.Fatalf("CompileSchema(%s) = %v; the library takes it", bad, err)
		}
		if s.Validate([]byte(`{"x": null}`)) == nil && s.Validate([]byte(`1`)) == nil {
			t.Errorf("%s validates; the test wants a schema whose cycle refuses data", bad)
		}
		err = CheckSchema(bad)
		if err == nil || !strings.Contains(err.Error(), "reference cycle") || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "rivora:///") {
			t.Errorf("CheckSchema(%s) = %v, want a reference cycle naming %q (and no internal URL)", bad, err, want)
		}
	}
	tree := `{"$defs":{"node":{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#/$defs/node"}}}}},"$ref":"#/$defs/node"}`
	if err := CheckSchema(tree); err != nil {
		t.Fatalf("CheckSchema of a tree (recursion through items) = %v, want nil", err)
	}
	if err := CheckSchema(`{"type": 12}`); err == nil || !strings.Contains(err.Error(), "not a valid JSON Schema") {
		t.Fatalf("CheckSchema of a schema that does not compile = %v, want CompileSchema's error", err)
	}
}

// A filter stored before the regex checks existed still loads on the
// agents (LoadFilter): one that failed would stop the agent applying any
// subscription. It runs within the same bounds: matches() reads at most
// MaxRegexInput bytes.
func TestLoadFilterTakesWhatCompileFilterNoLongerDoes(t *testing.T) {
	const stored = `data.s.matches(data.re)`
	if _, err := CompileFilter(stored); err == nil {
		t.Fatalf("CompileFilter(%s) accepted a pattern from the data", stored)
	}
	f, err := LoadFilter(stored)
	if err != nil {
		t.Fatalf("LoadFilter(%s): %v", stored, err)
	}
	if ok, err := f.Match(context.Background(), Input{Data: map[string]any{"s": "ord_1", "re": "^ord_"}}); !ok || err != nil {
		t.Fatalf("the stored filter = %v, %v; want a match", ok, err)
	}
	long := Input{Data: map[string]any{"s": strings.Repeat("a", MaxRegexInput+1), "re": "a+b"}}
	if ok, err := f.Match(context.Background(), long); ok || err == nil {
		t.Fatalf("the stored filter over a long string = %v, %v; want the bound's error", ok, err)
	}
}

// A stored filter that takes its pattern from the event runs a pattern
// only within MaxRegexInstructions: a running regex cannot be stopped, and
// the meter charges such a pattern as if it were within the bound. A
// stored filter's own literal past the bound (made before the bound) still
// runs, charged by its size.
func TestAPatternFromTheEventIsBoundedByItsProgram(t *testing.T) {
	f, err := LoadFilter(`data.s.matches(data.re)`)
	if err != nil {
		t.Fatal(err)
	}
	big := Input{Data: map[string]any{"s": strings.Repeat("a", 1000), "re": "^a{1000}$"}}
	if ok, err := f.Match(context.Background(), big); ok || err == nil || !strings.Contains(err.Error(), "instructions") {
		t.Fatalf("a pattern from the event past the bound = %v, %v; want no match and the bound's error", ok, err)
	}
	if v, kept := patterns.m.Load("^a{1000}$"); kept && v.(compiledPattern).re != nil {
		t.Fatal("a pattern from the event refused for its size was kept compiled (each such event would cost its program's memory)")
	}
	// Refused from its parse, without building its program: a pattern of
	// 585k instructions took ~0.5 s and ~140 MiB to build, per event.
	huge := Input{Data: map[string]any{"s": "a", "re": strings.Repeat("a{1000}", 585)}}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ok, err := f.Match(context.Background(), huge)
	runtime.ReadMemStats(&after)
	if ok || err == nil || !strings.Contains(err.Error(), "instructions") {
		t.Fatalf("a pattern of 585k instructions from the event = %v, %v; want the bound's error", ok, err)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 16<<20 {
		t.Fatalf("refusing a pattern of 585k instructions from the event allocated %d MiB: its program was built", allocated>>20)
	}
	small := Input{Data: map[string]any{"s": strings.Repeat("a", 1000), "re": "^a+$"}}
	if ok, err := f.Match(context.Background(), small); !ok || err != nil {
		t.Fatalf("a pattern from the event within the bound = %v, %v; want a match", ok, err)
	}
	const literal = `data.s.matches("^b{600}$")`
	if _, err := CompileFilter(literal); err == nil {
		t.Fatalf("CompileFilter(%s) accepted a literal past the bound", literal)
	}
	stored, err := LoadFilter(literal)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := stored.Match(context.Background(), Input{Data: map[string]any{"s": strings.Repeat("b", 600)}}); !ok || err != nil {
		t.Fatalf("a stored filter's own literal past the bound = %v, %v; want it run as before (a match)", ok, err)
	}
	global, err := LoadFilter(`matches(data.s, data.re)`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := global.Match(context.Background(), big); ok || err == nil || !strings.Contains(err.Error(), "instructions") {
		t.Fatalf("the function form, a pattern from the event past the bound = %v, %v; want no match and the bound's error", ok, err)
	}
	// The same pattern from the event is still refused: a stored
	// filter's literal opens nothing to the events of other filters.
	same := Input{Data: map[string]any{"s": strings.Repeat("b", 600), "re": "^b{600}$"}}
	if ok, err := f.Match(context.Background(), same); ok || err == nil || !strings.Contains(err.Error(), "instructions") {
		t.Fatalf("a stored filter's large literal, from the event = %v, %v; want no match and the bound's error", ok, err)
	}
}

// DecodeData reads a number past a double's range as ±infinity and the
// rest of the data as sent; only a payload that is not JSON fails.
func TestDecodeDataReadsNumbersPastADoubleAsInfinity(t *testing.T) {
	v, err := DecodeData([]byte(`{"big":1e400,"small":-1e400,"tiny":1e-400,"n":[1.5,"s"]}`))
	if err != nil {
		t.Fatal(err)
	}
	got := v.(map[string]any)
	if !math.IsInf(got["big"].(float64), 1) || !math.IsInf(got["small"].(float64), -1) || got["tiny"].(float64) != 0 {
		t.Fatalf("decoded %v, want +Inf, -Inf and 0", got)
	}
	if n := got["n"].([]any); n[0].(float64) != 1.5 || n[1].(string) != "s" {
		t.Fatalf("the rest decoded as %v", n)
	}
	if _, err := DecodeData([]byte(`{"amount": 1`)); err == nil {
		t.Fatal("a payload that is not JSON decoded")
	}
}

// A filter that does not compile is refused with where, in the filter's
// own terms: the column (and line, past one) counted in characters from
// 1, and the line quoted with a caret under that column as a terminal
// shows it — a tab stays a tab, a wide character takes two columns, an
// é one. CEL's text named the filter "<input>", drew dots to the caret,
// two columns wide under every non-ASCII character (the caret stood right
// of the error after "café"), and listed its parser's token names.
func TestFilterCompileErrorPointsAtTheColumn(t *testing.T) {
	for _, tc := range []struct {
		src, where, line, caret string
	}{
		{`data.amount > `, "at column 15 (the end of the filter): syntax error: the filter ends where it expects a value", `data.amount > `, strings.Repeat(" ", 14) + "^"},
		{`data.name == "café" && data.x >> 1`, "at column 32: syntax error: extraneous input '>'", `data.name == "café" && data.x >> 1`, strings.Repeat(" ", 31) + "^"},
		{`"日本" == data.x && data.y >> 1`, "at column 27:", `"日本" == data.x && data.y >> 1`, strings.Repeat(" ", 28) + "^"},
		{"data.a > 1 &&\n\tdata.b >> 2", "at line 2, column 10:", "\tdata.b >> 2", "\t        ^"},
		{`dat.amount > 1`, "at column 1: undeclared reference to 'dat': a filter reads data, type, customer and lane", `dat.amount > 1`, "^"},
		{`data.amount > 1 + 'x'`, "at column 17: found no matching overload for '+' applied to '(int, string)'", `data.amount > 1 + 'x'`, strings.Repeat(" ", 16) + "^"},
	} {
		_, err := CompileFilter(tc.src)
		if err == nil {
			t.Fatalf("CompileFilter(%q) compiled", tc.src)
		}
		got := strings.Split(err.Error(), "\n")
		if len(got) != 3 || !strings.HasPrefix(got[0], "filter does not compile "+tc.where) ||
			got[1] != "    "+tc.line || got[2] != "    "+tc.caret {
			t.Errorf("CompileFilter(%q):\n%v\nwant %q, then the line and its caret:\n    %s\n    %s", tc.src, err, "filter does not compile "+tc.where, tc.line, tc.caret)
		}
		if strings.Contains(err.Error(), "<input>") || strings.Contains(err.Error(), "IDENTIFIER") {
			t.Errorf("CompileFilter(%q) speaks of CEL's parser: %v", tc.src, err)
		}
	}
	_, err := CompileFilter(`data.a >> 1 && data.b >> 2 && data.c >> 3 && data.d >> 4`)
	if err == nil || !strings.Contains(err.Error(), "\nand at column 24:") || !strings.HasSuffix(err.Error(), "\n(and 1 more)") {
		t.Errorf("four errors: %v, want the first three, in order, and how many more", err)
	}
}

// A filter knows whether it reads data: only then does an event's JSON
// have to be decoded (and valid) for it.
func TestFilterReadsData(t *testing.T) {
	for src, want := range map[string]bool{
		`data.amount > 100`:                          true,
		`has(data.x) || lane == "a"`:                 true,
		`lane.startsWith("user-")`:                   false,
		`type == "order.created" && customer != "x"`: false,
	} {
		f, err := CompileFilter(src)
		if err != nil {
			t.Fatal(err)
		}
		if f.ReadsData() != want {
			t.Errorf("CompileFilter(%q).ReadsData() = %v, want %v", src, f.ReadsData(), want)
		}
	}
}

// leastInstructions never counts more than the program has: a pattern
// within the bound is never refused for its estimate.
func TestLeastInstructionsIsALowerBound(t *testing.T) {
	for _, re := range []string{
		"", "a", "abc", "^ord_[0-9]+$", "a{2,5}", "x{0}", "x{0,0}", "(ab){3}", "(?i)hello", "a|b|c", "(a|bc)*d?",
		"a{200}b{200}", "[a-z]{1,30}@[a-z]+\\.(com|org)", "(?:x{2}){3}", ".*", "\\bword\\b", "a{1000}", "(a{10}|b{20}){5}",
		"(?:" + strings.Repeat("y", 600) + "){0}", "(?:(?:)*){300}", "(?:(?:x{0})*){300}", "(?:a?){100}", "(?:(?:)+){50}",
	} {
		parsed, err := syntax.Parse(re, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := syntax.Compile(parsed.Simplify())
		if err != nil {
			t.Fatal(err)
		}
		if least := leastInstructions(parsed, 0); least > len(prog.Inst) {
			t.Errorf("%q: leastInstructions %d, but its program has %d", re, least, len(prog.Inst))
		}
	}
}
