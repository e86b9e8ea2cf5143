package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/poll"
	"github.com/rivora/rivora/testkit/rig"
)

// exampleRole is the first role a worked example's section header names:
// its commands run with a token of that role (Acme: a customer token).
var exampleRole = regexp.MustCompile(`\b(admin|operator|Acme)`)

// exampleStep is one rivoractl command of a worked example, with the role
// its section names and the output lines the example shows after it.
type exampleStep struct {
	role, section string
	args          []string
	shownLines    int
}

// docs/subscriptions.md's worked example runs as written, each section
// with a token of the role its header names: a header that names a role
// the API refuses for its commands (an operator creating destinations or
// event types) fails here.
func TestSubscriptionsWorkedExampleRoles(t *testing.T) {
	doc, err := os.ReadFile("../docs/subscriptions.md")
	if err != nil {
		t.Fatal(err)
	}
	_, example, _ := strings.Cut(string(doc), "## A worked example")
	_, example, _ = strings.Cut(example, "```sh\n")
	example, _, _ = strings.Cut(example, "```")
	dir := t.TempDir()
	steps := parseExample(t, example, dir)
	if len(steps) < 8 {
		t.Fatalf("found %d rivoractl commands in the worked example; the parser is wrong", len(steps))
	}
	t.Chdir(dir) // the example's files (its schema) are written here

	d := rig.StartDev(t, t.TempDir(), rig.Options{})
	tokens := map[string]string{
		"admin":    d.AdminToken,
		"operator": d.Token(rivorav1.Role_ROLE_OPERATOR),
		"Acme":     d.Token(rivorav1.Role_ROLE_CUSTOMER, "acme"),
	}
	for _, s := range steps {
		args := append([]string{"--token", tokens[s.role]}, s.args...)
		if s.args[0] != "publish" {
			if r := run(t, d.URL, "", args...); r.code != 0 {
				t.Fatalf("section %q, as %s: rivoractl %s: exit %d: %s", s.section, s.role, strings.Join(s.args, " "), r.code, r.stderr)
			}
			continue
		}
		// The agent routes once it has the subscriptions: until then a
		// publish matches fewer.
		var r result
		poll.True(t, "the publish shows the example's routes", 10*time.Second, func() bool {
			r = run(t, d.URL, "", args...)
			return r.code == 0 && strings.Count(r.stdout, "\n") == s.shownLines
		})
	}
}

// parseExample reads a worked example's shell: sections begin with a
// comment after a blank line; a heredoc (cat > FILE <<'END') is written
// into dir; lines other than rivoractl commands (export, comments) are
// skipped, and the comment lines right after a command are its output.
func parseExample(t *testing.T, sh, dir string) []exampleStep {
	t.Helper()
	lines := strings.Split(strings.ReplaceAll(sh, "\\\n", " "), "\n")
	var steps []exampleStep
	role, section, afterBlank := "", "", true
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		switch {
		case line == "":
			afterBlank = true
			continue
		case strings.HasPrefix(line, "#") && afterBlank:
			header := line
			for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "#") {
				i++
				header += " " + lines[i]
			}
			section = strings.TrimSpace(strings.TrimPrefix(line, "#"))
			if m := exampleRole.FindString(header); m != "" {
				role = m
			}
		case strings.HasPrefix(line, "#") && len(steps) > 0:
			steps[len(steps)-1].shownLines++
		case strings.HasPrefix(line, "cat > "):
			name, end, _ := strings.Cut(strings.TrimPrefix(line, "cat > "), " <<")
			end = strings.Trim(end, "'\"")
			var body []string
			for i++; i < len(lines) && lines[i] != end; i++ {
				body = append(body, lines[i])
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(body, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(line, "rivoractl "):
			if role == "" {
				t.Fatalf("the worked example runs %q before any header names a role", line)
			}
			steps = append(steps, exampleStep{role: role, section: section, args: shellWords(t, strings.TrimPrefix(line, "rivoractl "))})
		}
		afterBlank = false
	}
	return steps
}

// shellWords splits a command line as sh would, for what the examples
// use: blanks, 'single' and "double" quotes.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}
