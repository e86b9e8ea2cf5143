package cli

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A destination under a runtime override says so: which limits it sets,
// who set it, until when, and the destination's own values, which an
// update changes and the destination returns to.
func TestDestinationShowsItsOverride(t *testing.T) {
	d := &rivorav1.Destination{
		Id: "slow", Url: "https://example.com/hook",
		Limits:     &rivorav1.Limits{RatePerSecond: 10, Burst: 20},
		Configured: &rivorav1.Limits{RatePerSecond: 4},
		Override: &rivorav1.LimitsOverride{
			Limits: &rivorav1.Limits{RatePerSecond: 10}, Author: "alice", Reason: "INC-7",
			ExpiresAt: timestamppb.Now(),
		},
	}
	var out strings.Builder
	if err := writeDestination(&out, d, nil); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"RATE           10/s", "OVERRIDE       rate per second 10/s by alice (INC-7) until", "the destination's own: rate per second 4/s", "rivoractl limits clear slow"} {
		if !strings.Contains(text, want) {
			t.Errorf("destination output lacks %q:\n%s", want, text)
		}
	}
	if i, j := strings.Index(text, "MAX IN FLIGHT"), strings.Index(text, "OVERRIDE"); i < 0 || j < i {
		t.Errorf("OVERRIDE is not after MAX IN FLIGHT:\n%s", text)
	}
	d.Override = nil
	out.Reset()
	if err := writeDestination(&out, d, nil); err != nil || strings.Contains(out.String(), "OVERRIDE") {
		t.Fatalf("a destination without an override shows one (%v):\n%s", err, out.String())
	}
}

// A destination that does not drain at its current rate says why.
func TestNoDrainCause(t *testing.T) {
	for _, c := range []struct {
		h    *rivorav1.DestinationHealth
		want string
	}{
		{&rivorav1.DestinationHealth{State: "parked"}, "parked: only probes go out until the partner answers"},
		{&rivorav1.DestinationHealth{State: "parked", Paused: true, PauseReason: "maintenance"}, "paused"},
		{&rivorav1.DestinationHealth{State: "healthy"}, "its rate is 0"},
	} {
		if got := noDrainCause(c.h); !strings.Contains(got, c.want) {
			t.Errorf("%v: %q, want it to say %q", c.h, got, c.want)
		}
	}
}

// limits get shows the destination's own value beside the effective one,
// so an override does not hide what an update changed.
func TestLimitsShowTheDestinationsOwn(t *testing.T) {
	var out strings.Builder
	e := &env{out: &out}
	err := e.writeLimits(&rivorav1.GetLimitsResponse{
		Effective:   &rivorav1.Limits{RatePerSecond: 10, Burst: 20},
		Destination: &rivorav1.Limits{RatePerSecond: 4},
		File:        &rivorav1.Limits{RatePerSecond: 100, Burst: 20},
		Sources:     map[string]*rivorav1.LimitSource{"rate_per_second": {Source: "override", Author: "alice"}, "burst": {Source: "file"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if f := strings.Fields(lines[0]); len(f) != 5 || f[2] != "DESTINATION" {
		t.Fatalf("header %q, want LIMIT EFFECTIVE DESTINATION FILE SOURCE", lines[0])
	}
	if f := strings.Fields(lines[1]); f[0] != "rate_per_second" || f[1] != "10/s" || f[2] != "4/s" || f[3] != "100/s" || f[4] != "override" {
		t.Errorf("rate row %q, want effective 10/s, destination 4/s, file 100/s, override", lines[1])
	}
	if f := strings.Fields(lines[2]); f[0] != "burst" || f[2] != "-" {
		t.Errorf("burst row %q, want the destination's own unset (-)", lines[2])
	}
}

// Without a limits file, limits get says what FILE is then (the built-in
// defaults): it read as a file's values that nobody wrote.
func TestLimitsWithoutAFileSaySo(t *testing.T) {
	for _, file := range []string{"", "limits.yaml"} {
		var out strings.Builder
		e := &env{out: &out}
		if err := e.writeLimits(&rivorav1.GetLimitsResponse{Effective: &rivorav1.Limits{}, File: &rivorav1.Limits{}, LimitsFile: file}); err != nil {
			t.Fatal(err)
		}
		if said := strings.Contains(out.String(), "No limits file"); said != (file == "") {
			t.Errorf("limits file %q: output says there is none: %v\n%s", file, said, out.String())
		}
	}
}

// A partner's words shown in a table cell are one line, and no control
// or format character reaches the terminal (an ESC would start an escape
// sequence, U+202E reverse what follows): each is shown escaped.
func TestOneLineKeepsControlCharactersOut(t *testing.T) {
	if got, want := oneLine("HTTP 500: \x1b[31mred\x1b[0m\n\tnext\x07 \u202eusd"), `HTTP 500: \x1b[31mred\x1b[0m next\x07 \u202eusd`; got != want {
		t.Fatalf("oneLine = %q, want %q", got, want)
	}
}

// visible writes out what a terminal would obey, and nothing else: it
// changes no printable text (a backslash included), so a value escaped
// twice reads as escaped once.
func TestVisible(t *testing.T) {
	for _, c := range []struct{ in, want, text string }{
		{`lane-1 é/42 \x1b`, `lane-1 é/42 \x1b`, `lane-1 é/42 \x1b`},
		{"\x1b]0;PWN\x07lane", `\x1b]0;PWN\x07lane`, `\x1b]0;PWN\x07lane`},
		{"l\r\nX-Injected: 1\tcol", `l\r\nX-Injected: 1\tcol`, "l\\r\nX-Injected: 1\tcol"},
		{"pay \u202eusd\u200b\u2066\u2028\u0085\x7f", `pay \u202eusd\u200b\u2066\u2028\u0085\x7f`, `pay \u202eusd\u200b\u2066\u2028\u0085\x7f`},
		{"tag \U000e0041 bad \xff\xfe utf-8 \ufffd", `tag \U000e0041 bad \xff\xfe utf-8 ` + "\ufffd", `tag \U000e0041 bad \xff\xfe utf-8 ` + "\ufffd"},
	} {
		if got := visible(c.in); got != c.want {
			t.Errorf("visible(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := visible(visible(c.in)); got != c.want {
			t.Errorf("visible twice (%q) = %q, want %q", c.in, got, c.want)
		}
		if got := visibleText(c.in); got != c.text {
			t.Errorf("visibleText(%q) = %q, want %q", c.in, got, c.text)
		}
	}
}

// An override whose fields were set for different reasons shows each
// field's own (destinations get gave the latest change's to every field).
func TestOverrideShowsEachFieldsReason(t *testing.T) {
	o := &rivorav1.LimitsOverride{
		Limits: &rivorav1.Limits{RatePerSecond: 2, MaxAttempts: 2}, Author: "bob", Reason: "poison INC-6",
		Fields: map[string]*rivorav1.OverrideField{
			"rate_per_second": {Author: "alice", Reason: "slow drain INC-6"},
			"max_attempts":    {Author: "bob", Reason: "poison INC-6"},
		},
	}
	got := overrideText(o, &rivorav1.Limits{}, "shared")
	if want := "rate per second 2/s by alice (slow drain INC-6); max attempts 2 by bob (poison INC-6);"; !strings.HasPrefix(got, want) {
		t.Errorf("override %q, want it to begin %q", got, want)
	}
}

// With no limits file, limits diff says so and heads its base column
// WITHOUT OVERRIDE (the server lists only the runtime overrides then); it
// read as drift from a file nobody wrote.
func TestLimitsDiffWithoutAFile(t *testing.T) {
	var out strings.Builder
	e := &env{out: &out}
	err := e.writeDrifts(&rivorav1.DiffLimitsResponse{Drifts: []*rivorav1.LimitsDrift{
		{DestinationId: "shared", Field: "rate_per_second", FileValue: "7", EffectiveValue: "2", Source: &rivorav1.LimitSource{Source: "override", Author: "alice", Reason: "slow drain INC-6"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.HasPrefix(lines[0], "No limits file") || !strings.Contains(lines[1], "WITHOUT OVERRIDE") || !strings.Contains(lines[2], "override by alice: slow drain INC-6") {
		t.Errorf("limits diff without a file:\n%s", out.String())
	}
	out.Reset()
	if err := e.writeDrifts(&rivorav1.DiffLimitsResponse{}); err != nil || !strings.HasPrefix(out.String(), "No limits file") || !strings.Contains(out.String(), "no runtime override in force") {
		t.Errorf("limits diff without a file or override (%v):\n%s", err, out.String())
	}
}
