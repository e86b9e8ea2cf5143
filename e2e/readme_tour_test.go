package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/syncbuf"
)

// tourCommand is one command of the README's tour, in the terminal it is
// typed in.
type tourCommand struct {
	terminal string // "terminal 2", from the block's first comment
	line     string // continuation lines joined, as sh reads them
}

// readmeTour reads the shell blocks of README.md's "A 60-second tour"
// section, in order. Each block's first line names its terminal
// ("# terminal 2: …"); a block without one continues the last terminal.
func readmeTour(t *testing.T) []tourCommand {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "## A 60-second tour")
	if start < 0 {
		t.Fatalf(`README.md has no "## A 60-second tour" section`)
	}
	section := text[start+3:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	if end := strings.Index(section, "During an incident"); end >= 0 {
		section = section[:end]
	}
	var cmds []tourCommand
	terminal := ""
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		body := strings.ReplaceAll(block[1], "\\\n", "")
		for i, line := range strings.Split(body, "\n") {
			line = strings.TrimSpace(line)
			if m := regexp.MustCompile(`^# (terminal \d+)`).FindStringSubmatch(line); i == 0 && m != nil {
				terminal = m[1]
			}
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			// A trailing comment is the reader's, not the shell's (the
			// tour quotes no " #").
			line = regexp.MustCompile(`\s+# .*$`).ReplaceAllString(line, "")
			cmds = append(cmds, tourCommand{terminal: terminal, line: line})
		}
	}
	return cmds
}

// The README's tour, run as a newcomer would type it, in a fresh
// directory, against the binaries this test built: it shows a verified
// delivery within the first minute, then the 503 incident and the
// recovery.
//
// What differs from typing it, and why:
//   - `go run ./cmd/X` runs the X built for this test, found on PATH: the
//     README's own alternative (`go install ./cmd/...`), and one `go run`
//     per command would compile each time, seconds apiece;
//   - ports: 127.0.0.1:7400 and :9000 may be taken on this machine (other
//     tests run in parallel, a developer's own rivora dev), so rivora dev
//     gets a free port through RIVORA_LISTEN and the CLI through
//     RIVORA_SERVER (the variables the README's --help documents), and
//     :9000 is replaced by a free port (listen is given --listen with it);
//   - the test waits as a reader would watch: for rivora dev to be up
//     before the next terminal, and for terminal 2 to show an event
//     before terminal 3 asks about it or terminal 2 is restarted;
//     <EVENT_ID> is the id the last publish printed.
func TestReadmeTour(t *testing.T) {
	if rivoractlBuild != nil {
		t.Fatalf("rivoractl did not build: %v", rivoractlBuild)
	}
	cmds := readmeTour(t)
	if len(cmds) < 8 {
		t.Fatalf("the README's tour has %d commands; the parser found too few: %v", len(cmds), cmds)
	}
	dir := t.TempDir()
	bin := filepath.Dir(rivoraBin)
	server := "127.0.0.1:" + strconv.Itoa(freePort(t))
	receiver := "127.0.0.1:" + strconv.Itoa(freePort(t))
	baseEnv := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"RIVORA_LISTEN="+server, "RIVORA_SERVER=http://"+server)
	envs := map[string][]string{}
	running := map[string]*tourProc{}
	t.Cleanup(func() {
		for _, p := range running {
			p.kill()
		}
	})
	started := time.Now()
	var lastEvent, firstEvent string
	var firstSeen time.Duration

	for _, c := range cmds {
		line := strings.ReplaceAll(c.line, "go run ./cmd/rivoractl", "rivoractl")
		line = strings.ReplaceAll(line, "go run ./cmd/rivora", "rivora")
		line = strings.ReplaceAll(line, "127.0.0.1:9000", receiver)
		line = strings.ReplaceAll(line, "<EVENT_ID>", lastEvent)
		env := append(append([]string{}, baseEnv...), envs[c.terminal]...)
		t.Logf("%s$ %s", c.terminal, c.line)
		switch {
		case strings.HasPrefix(line, "export "):
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "export "), "=")
			out := tourRun(t, dir, env, line+` && printf %s "$`+name+`"`)
			envs[c.terminal] = append(envs[c.terminal], name+"="+out)
		case strings.HasPrefix(line, "rivora dev"):
			running[c.terminal] = startTourProc(t, dir, env, line)
			poll.True(t, "rivora dev up", 60*time.Second, func() bool {
				resp, err := http.Get("http://" + server + "/healthz")
				if err == nil {
					resp.Body.Close()
				}
				_, tokenErr := os.Stat(filepath.Join(dir, "data", "admin.token"))
				return err == nil && resp.StatusCode == http.StatusOK && tokenErr == nil
			})
		case strings.HasPrefix(line, "rivoractl listen"):
			if p := running[c.terminal]; p != nil {
				// Ctrl-C, once the reader saw the last event there, or,
				// where it answered an error, saw it tried again.
				tries := 1
				if strings.Contains(strings.Join(p.cmd.Args, " "), "--status") {
					tries = 2
				}
				poll.True(t, "terminal 2 shows the last event", 60*time.Second, func() bool { return p.count(lastEvent) >= tries })
				p.interrupt(t)
			}
			if !strings.Contains(line, "--listen") {
				line += " --listen " + receiver
			}
			p := startTourProc(t, dir, env, line)
			running[c.terminal] = p
			poll.True(t, "listen listening", 15*time.Second, func() bool { return strings.Contains(p.err.String(), "Listening on") })
		default:
			if strings.Contains(c.line, "<EVENT_ID>") {
				// The reader asks after seeing it arrive in terminal 2.
				waitShown(t, running["terminal 2"], lastEvent)
			}
			out := tourRun(t, dir, env, line)
			t.Logf("%s", out)
			if strings.HasPrefix(line, "rivoractl publish") {
				lastEvent = eventIDPattern.FindString(out)
				if lastEvent == "" {
					t.Fatalf("publish printed no event id:\n%s", out)
				}
				if firstEvent == "" {
					firstEvent = lastEvent
					listen := running["terminal 2"]
					if listen == nil {
						t.Fatalf("the tour publishes before terminal 2 listens")
					}
					waitShown(t, listen, firstEvent)
					firstSeen = time.Since(started)
					if shown := listen.lineOf(firstEvent); !strings.Contains(shown, " verified ") || !strings.Contains(shown, " 200") {
						t.Fatalf("terminal 2 shows the first event as %q, want verified and answered 200", shown)
					}
				}
			}
		}
	}
	t.Logf("the first verified delivery was on screen %s after `rivora dev` started", firstSeen.Round(time.Millisecond))
	if firstSeen > time.Minute {
		t.Errorf("the first verified delivery took %s, want it within the first minute", firstSeen)
	}
	// The incident: the second event was answered 503, then arrived
	// verified once listen answered 2xx again.
	if lastEvent == firstEvent {
		t.Fatalf("the tour published only once; the incident part is missing")
	}
	listen := running["terminal 2"]
	waitShown(t, listen, lastEvent)
	if shown := listen.lineOf(lastEvent); !strings.Contains(shown, " verified ") || !strings.Contains(shown, " 200") {
		t.Errorf("after the incident terminal 2 shows %q, want the held event verified, 200", shown)
	}
	out := tourRun(t, dir, append(append([]string{}, baseEnv...), envs["terminal 3"]...), "rivoractl events get "+lastEvent)
	if !strings.Contains(out, "delivered") || !strings.Contains(out, "not charged: destination down") {
		t.Errorf("events get of the held event after the tour:\n%s\nwant delivered, with tries not charged while the destination was down", out)
	}
	t.Logf("the whole tour took %s; terminal 2's last screen:\n%s", time.Since(started).Round(time.Millisecond), listen.out.String())
}

// waitShown waits until listen p printed a line for event id: a reader
// watching terminal 2.
func waitShown(t *testing.T, p *tourProc, id string) {
	t.Helper()
	if p == nil || id == "" {
		return
	}
	poll.True(t, "terminal 2 shows "+id, 60*time.Second, func() bool { return p.lineOf(id) != "" })
}

// tourRun runs one command line with sh, as a terminal would, and fails
// the test when it exits non-zero.
func tourRun(t *testing.T, dir string, env []string, line string) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	return string(out)
}

// tourProc is a command that runs until Ctrl-C: rivora dev, listen.
type tourProc struct {
	cmd      *exec.Cmd
	out, err *syncbuf.Buffer
	done     chan error
}

func startTourProc(t *testing.T, dir string, env []string, line string) *tourProc {
	t.Helper()
	p := &tourProc{out: &syncbuf.Buffer{}, err: &syncbuf.Buffer{}, done: make(chan error, 1)}
	// exec: the signal reaches the command, not a shell around it.
	p.cmd = exec.Command("sh", "-c", "exec "+line)
	p.cmd.Dir, p.cmd.Env = dir, env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p
}

func (p *tourProc) count(id string) int {
	if id == "" {
		return 1 << 30
	}
	return strings.Count(p.out.String(), id)
}

func (p *tourProc) lineOf(id string) string {
	for _, line := range strings.Split(p.out.String(), "\n") {
		if strings.Contains(line, id) {
			return line
		}
	}
	return ""
}

// interrupt is Ctrl-C; the command must exit 0 promptly.
func (p *tourProc) interrupt(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("Ctrl-C: %v", err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("%s after Ctrl-C: %v\n%s", p.cmd.Args, err, p.err.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not stop within 10s of Ctrl-C", p.cmd.Args)
	}
}

func (p *tourProc) kill() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}
