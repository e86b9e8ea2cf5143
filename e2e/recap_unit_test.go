package e2e

import (
	"reflect"
	"strings"
	"testing"
)

// TestRecapKeepsEachFailuresOwnLines: the recap names every failing test
// (subtests too) with its own lines, without the process dumps, the
// continuation lines or the passing tests.
func TestRecapKeepsEachFailuresOwnLines(t *testing.T) {
	out := strings.Join([]string{
		"--- FAIL: TestA (3.00s)",
		"    faultcell_test.go:114: rivora agent a1 exited before it was ready: exit status 1",
		"    process_test.go:123: ---- rivora agent a3 output ----",
		"        time=... level=INFO msg=noise",
		"    faultcell_test.go:120: second line",
		"        its continuation",
		"--- PASS: TestB (1.00s)",
		"    b_test.go:1: a passing test's log",
		"--- FAIL: TestC (9.00s)",
		"    --- FAIL: TestC/sub (1.00s)",
		"        c_test.go:7: checker: 3 lost",
		"FAIL",
	}, "\n")
	got := collectFailures(strings.NewReader(out))
	want := []failedTest{
		{name: "TestA", lines: []string{
			"faultcell_test.go:114: rivora agent a1 exited before it was ready: exit status 1",
			"faultcell_test.go:120: second line",
		}},
		{name: "TestC"},
		{name: "TestC/sub", lines: []string{"c_test.go:7: checker: 3 lost"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("recap:\n got %+v\nwant %+v", got, want)
	}
}

// TestRecapPrefersReasonsAndKeepsOrder: of many lines, those that read
// like a reason are kept first, the rest filled from the end, in order.
func TestRecapPrefersReasonsAndKeepsOrder(t *testing.T) {
	var lines []string
	for i := range 20 {
		lines = append(lines, "x_test.go:1: log "+string(rune('a'+i)))
	}
	lines[3] = "x_test.go:2: checker: 1 lost"
	got := pickReasons(lines)
	if len(got) != recapLinesPerTest || got[0] != lines[3] || got[len(got)-1] != lines[19] {
		t.Fatalf("picked %q", got)
	}
}
