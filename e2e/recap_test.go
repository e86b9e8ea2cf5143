package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// A failed e2e test prints its own lines, then every process's output
// (agents, control planes, Consul): hundreds of lines. A CI log cut to
// its start and its end shows the first failure's reason and the last
// process's output, and hides the other failures' reasons. The recap
// repeats, after everything, each failing test's own lines (not the
// process output), so the end of the log names every failure.

// recap tees the test binary's standard output and collects the failing
// tests' own lines.
type recap struct {
	stdout *os.File
	pipe   *os.File
	done   chan []failedTest
}

type failedTest struct {
	name  string
	lines []string
}

const (
	recapLinesPerTest = 8
	recapLineChars    = 240
)

// startRecap sends os.Stdout through the recap until finish.
func startRecap() (*recap, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	rc := &recap{stdout: os.Stdout, pipe: w, done: make(chan []failedTest, 1)}
	os.Stdout = w
	go func() { rc.done <- collectFailures(io.TeeReader(r, rc.stdout)) }()
	return rc, nil
}

// finish restores os.Stdout and prints the recap when a test failed.
func (rc *recap) finish() {
	os.Stdout = rc.stdout
	rc.pipe.Close()
	failed := <-rc.done
	if len(failed) == 0 {
		return
	}
	fmt.Fprintf(rc.stdout, "---- recap: the failing tests' own lines (without their processes' output) ----\n")
	for _, f := range failed {
		fmt.Fprintf(rc.stdout, "--- FAIL: %s\n", f.name)
		for _, l := range pickReasons(f.lines) {
			fmt.Fprintf(rc.stdout, "    %s\n", l)
		}
	}
}

var (
	failLine = regexp.MustCompile(`^(\s*)--- FAIL: (\S+)`)
	// Another test's result, or the binary's verdict, ends a block.
	otherResult = regexp.MustCompile(`^(\s*--- (PASS|SKIP): |FAIL$|PASS$)`)
	// A test's own line: "file_test.go:123: message", one level deeper
	// than its "--- FAIL" line. Its continuation lines are deeper still.
	ownLine = regexp.MustCompile(`^(\s*)(\S+\.go:\d+: .*)$`)
)

// collectFailures reads the test output to its end and returns each
// failing test with its own first lines, leaving out the process dumps
// (process_test.go).
func collectFailures(r io.Reader) []failedTest {
	var failed []failedTest
	cur, depth := -1, 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if m := failLine.FindStringSubmatch(line); m != nil {
			failed = append(failed, failedTest{name: m[2]})
			cur, depth = len(failed)-1, len(m[1])+4
			continue
		}
		if otherResult.MatchString(line) {
			cur = -1
			continue
		}
		m := ownLine.FindStringSubmatch(line)
		if cur < 0 || m == nil || len(m[1]) != depth || strings.HasPrefix(m[2], "process_test.go:") {
			continue
		}
		text := m[2]
		if len(text) > recapLineChars {
			text = text[:recapLineChars] + "…"
		}
		failed[cur].lines = append(failed[cur].lines, text)
	}
	io.Copy(io.Discard, r)
	return failed
}

// failureWords mark a line that likely says why a test failed (a test's
// errors and its logs look alike in the output).
var failureWords = regexp.MustCompile(`(?i)fail|error|exited|not |never|lost|reorder|timeout|timed out|within|want|got|checker|stuck|panic`)

// pickReasons keeps at most recapLinesPerTest lines, in their order:
// those that look like reasons first, then the last others.
func pickReasons(lines []string) []string {
	keep := make([]bool, len(lines))
	n := 0
	for i, l := range lines {
		if n < recapLinesPerTest && failureWords.MatchString(l) {
			keep[i], n = true, n+1
		}
	}
	for i := len(lines) - 1; i >= 0 && n < recapLinesPerTest; i-- {
		if !keep[i] {
			keep[i], n = true, n+1
		}
	}
	var out []string
	for i, l := range lines {
		if keep[i] {
			out = append(out, l)
		}
	}
	return out
}
