package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/cli"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/syncbuf"
)

// asRivoractl makes this test binary run rivoractl (cli.Run, as main
// does) with the arguments after "--", for tests that need a process of
// its own to send Ctrl-C to.
const asRivoractl = "RIVORA_TEST_AS_RIVORACTL"

func TestMain(m *testing.M) {
	if os.Getenv(asRivoractl) != "" {
		for i, a := range os.Args {
			if a == "--" {
				os.Exit(cli.Run(append([]string{"rivoractl"}, os.Args[i+1:]...)))
			}
		}
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// rivoractl reading a JSON Schema from a terminal (--schema -) waits on
// stdin, which Ctrl-C does not end: both the first and the second Ctrl-C
// were ignored, and only closing stdin or killing rivoractl ended it. A
// second Ctrl-C now stops it at once, exit code 130.
func TestCtrlCStopsACommandWaitingOnStdin(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "--server", "http://127.0.0.1:1", "--token", "t", "event-types", "create", "order.created", "--schema", "-")
	cmd.Env = append(os.Environ(), asRivoractl+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	errOut := &syncbuf.Buffer{}
	cmd.Stderr = errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	// More than a pipe holds: once written, rivoractl has read some, so it
	// takes Ctrl-C (it reads stdin only after it asked for it).
	if _, err := stdin.Write([]byte(strings.Repeat(" ", 1<<20))); err != nil {
		t.Fatal(err)
	}
	// Ctrl-C until it exits: a second one pressed before the first was
	// taken would be one signal.
	var waitErr error
	poll.True(t, "rivoractl stopped by Ctrl-C", 10*time.Second, func() bool {
		select {
		case waitErr = <-exited:
			return true
		default:
			_ = cmd.Process.Signal(os.Interrupt)
			return false
		}
	})
	var exit *exec.ExitError
	if !errors.As(waitErr, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("rivoractl after Ctrl-C twice: %v, want exit code 130 (stderr %q)", waitErr, errOut.String())
	}
	if got := errOut.String(); !strings.HasSuffix(got, "rivoractl: stopped at once (Ctrl-C again)\n") {
		t.Fatalf("stderr %q, want it to say it stopped at once", got)
	}
}
