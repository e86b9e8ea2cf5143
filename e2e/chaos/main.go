// Command chaos runs Rivora's chaos benchmark: a cell of Consul, MinIO,
// two control planes and three agents, every link between them on its
// own cuttable proxy, under steady traffic over hundreds of lanes, through
// a random schedule of faults — silent cuts, one-way cuts, latency,
// flapping links, an isolated agent, a control plane cut off, kill -9,
// SIGSTOP/SIGCONT, a Consul restart, MinIO down, a full disk — then heal,
// drain and the checker (e2e/checker):
//
//	go run ./e2e/chaos --duration 60m --seed 7
//
// The schedule and the cell are the e2e package's TestChaos (e2e/
// chaos_test.go, on the same harness as the partition scenarios); this
// command runs it with `go test` for the duration and seed asked, prints
// every fault with its time as it happens and the checker's figures at
// the end, and, as its last line, one JSON object: acked, delivered,
// lost, reordered_lanes, duplicates, overlapping_writers, faults,
// faults_by_kind, worst_recovery_s, publish_p99_ms_during_faults, and
// more. It exits non-zero when the checker found a fault or the run
// failed. The whole test output goes to --log.
//
// It needs root (a full disk is a small tmpfs) and the Consul and MinIO
// servers `make servers` builds.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

func main() {
	fs := flag.NewFlagSet("chaos", flag.ExitOnError)
	duration := fs.Duration("duration", 60*time.Minute, "how long faults are injected (then heal, drain and check: a few minutes more)")
	seed := fs.Int64("seed", 0, "the schedule's seed (0: one from the clock, printed so the run can be repeated)")
	logPath := fs.String("log", "", "`FILE` for the whole test output (default: a file in the temp dir, named at the start)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./e2e/chaos [--duration 60m] [--seed N] [--log FILE]\n\n")
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:])
	if *duration <= 0 {
		fmt.Fprintln(os.Stderr, "chaos: --duration must be positive (such as 5m or 60m)")
		os.Exit(2)
	}
	if *seed == 0 {
		*seed = time.Now().UnixNano() % 1_000_000
	}
	os.Exit(run(*duration, *seed, *logPath))
}

func run(duration time.Duration, seed int64, logPath string) int {
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		return 2
	}
	if logPath == "" {
		logPath = filepath.Join(os.TempDir(), fmt.Sprintf("rivora-chaos-%d-%s.log", seed, time.Now().UTC().Format("20060102T150405")))
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		return 2
	}
	defer logFile.Close()
	report, err := os.CreateTemp("", "rivora-chaos-report-*.json")
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		return 2
	}
	report.Close()
	defer os.Remove(report.Name())

	fmt.Printf("chaos: seed %d, faults for %s, then heal, drain and check; full output in %s\n", seed, duration, logPath)
	// Setup, drain and the checker take minutes; a fault that wedges the
	// run is ended by go test's own timeout.
	timeout := duration + 30*time.Minute
	cmd := exec.Command("go", "test", "-count=1", "-v", "-run", "^TestChaos$", "-timeout", timeout.String(), "./e2e")
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"RIVORA_CHAOS_DURATION="+duration.String(),
		"RIVORA_CHAOS_SEED="+strconv.FormatInt(seed, 10),
		"RIVORA_CHAOS_REPORT="+report.Name())
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		return 2
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "chaos: go test: %v\n", err)
		return 2
	}
	echo(io.TeeReader(out, logFile))
	testErr := cmd.Wait()

	line, err := os.ReadFile(report.Name())
	line = bytes.TrimSpace(line)
	if err != nil || len(line) == 0 {
		fmt.Fprintf(os.Stderr, "chaos: the run ended without a report (%v); see %s\n", testErr, logPath)
		return 1
	}
	if testErr != nil {
		fmt.Fprintf(os.Stderr, "chaos: FAILED (%v); the test's errors are in %s\n", testErr, logPath)
	}
	fmt.Println(string(line))
	if testErr != nil {
		return 1
	}
	return 0
}

// logPrefix is what `go test -v` puts before a t.Logf line.
var logPrefix = regexp.MustCompile(`^\s+\w+_test\.go:\d+: `)

// echo prints the run's own lines (those of the schedule and the
// checker), without go test's file:line prefix, and the test's errors.
func echo(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	inBlock := false // a multi-line chaos log entry (its lines are indented)
	for sc.Scan() {
		line := sc.Text()
		prefixed := logPrefix.MatchString(line)
		text := logPrefix.ReplaceAllString(line, "")
		switch {
		case prefixed && strings.HasPrefix(text, "chaos"):
			fmt.Println(text)
			inBlock = true
		case prefixed:
			inBlock = false
			if strings.Contains(text, "checker:") || strings.Contains(text, "did not move") {
				fmt.Println(text)
			}
		case inBlock && strings.HasPrefix(line, "        "):
			fmt.Println(strings.TrimPrefix(line, "        "))
		case strings.HasPrefix(line, "--- FAIL") || strings.HasPrefix(line, "--- PASS") || strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "ok "):
			inBlock = false
			fmt.Println(line)
		default:
			inBlock = false
		}
	}
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run it inside the rivora module (go run ./e2e/chaos)")
	}
	return filepath.Dir(mod), nil
}
