package cli

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	ucli "github.com/urfave/cli/v2"
)

// testTakesValue mimics a command with value flags url, rate, data, o and
// output; everything else (force, h, unknown flags) is boolean.
func testTakesValue(name string) bool {
	switch name {
	case "url", "rate", "data", "o", "output":
		return true
	}
	return false
}

// reorderArgs lays out what splitArgs found the way normalizeArgs does
// for one command: every flag (with its value) ahead of the positionals,
// the relative order of flags and of positionals kept, and "--" (between
// them) kept when it was present. These tests pin splitArgs through it.
func reorderArgs(args []string, takesValue func(name string) bool) []string {
	flags, positionals, dashdash, _ := splitArgs(args, takesValue)
	out := make([]string, 0, len(args))
	for _, f := range flags {
		out = append(out, f.tokens...)
	}
	if dashdash {
		out = append(out, "--")
	}
	return append(out, positionals...)
}

func TestReorderArgs(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{"empty", nil, []string{}},
		{"positional only", []string{"ID"}, []string{"ID"}},
		{"flag after positional", []string{"ID", "--url", "U"}, []string{"--url", "U", "ID"}},
		{"flag before positional", []string{"--url", "U", "ID"}, []string{"--url", "U", "ID"}},
		{"inline value", []string{"ID", "--url=U"}, []string{"--url=U", "ID"}},
		{"single dash long flag", []string{"ID", "-url", "U"}, []string{"-url", "U", "ID"}},
		{"short flag with value", []string{"list", "-o", "json"}, []string{"-o", "json", "list"}},
		{"bool flag takes no value", []string{"ID", "--force", "X"}, []string{"--force", "ID", "X"}},
		{"bool flag with inline value", []string{"ID", "--force=false"}, []string{"--force=false", "ID"}},
		{"value that looks like a flag", []string{"ID", "--rate", "-5"}, []string{"--rate", "-5", "ID"}},
		{"value that is a double dash", []string{"--url", "--", "ID"}, []string{"--url", "--", "ID"}},
		{"interleaved", []string{"a", "-o", "json", "b", "--rate", "2", "c", "--force"},
			[]string{"-o", "json", "--rate", "2", "--force", "a", "b", "c"}},
		{"repeated flags keep order", []string{"--url", "1", "a", "--url", "2"}, []string{"--url", "1", "--url", "2", "a"}},
		{"double dash ends flags", []string{"a", "--", "--url", "U"}, []string{"--", "a", "--url", "U"}},
		{"flags before double dash move", []string{"a", "--force", "--", "-b"}, []string{"--force", "--", "a", "-b"}},
		{"second double dash is positional", []string{"a", "--", "b", "--", "c"}, []string{"--", "a", "b", "--", "c"}},
		{"double dash alone", []string{"--"}, []string{"--"}},
		{"single dash is positional", []string{"-", "--data", "x"}, []string{"--data", "x", "-"}},
		{"stdin data reference", []string{"--data", "@-", "ID"}, []string{"--data", "@-", "ID"}},
		{"dangling value flag stays", []string{"ID", "--url"}, []string{"--url", "ID"}},
		{"bad flag syntax kept for the parser", []string{"a", "---x"}, []string{"---x", "a"}},
		{"empty tokens are positional", []string{"", "--url", ""}, []string{"--url", "", ""}},
		{"unknown flag treated as boolean", []string{"a", "--bogus", "b"}, []string{"--bogus", "a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := reorderArgs(tt.in, testTakesValue)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("reorderArgs(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestSplitArgsDangling(t *testing.T) {
	for _, tt := range []struct {
		in   []string
		want bool
	}{
		{[]string{"--url"}, true},
		{[]string{"a", "--url"}, true},
		{[]string{"--url", "x"}, false},
		{[]string{"--url=x"}, false},
		{[]string{"--force"}, false},
		{[]string{"--", "--url"}, false},
	} {
		if _, _, _, got := splitArgs(tt.in, testTakesValue); got != tt.want {
			t.Errorf("splitArgs(%q) dangling = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func testApp() *ucli.App {
	var out, errb bytes.Buffer
	e := &env{in: strings.NewReader(""), out: &out}
	return e.newApp(&out, &errb)
}

func TestNormalizeArgs(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"flags after ID", "rivoractl destinations create ID --url U", "rivoractl destinations create --url U ID"},
		{"flags before ID", "rivoractl destinations create --url U ID", "rivoractl destinations create --url U ID"},
		{"global after command", "rivoractl destinations list -o json", "rivoractl -o json destinations list"},
		{"global inline after command", "rivoractl destinations list --output=json", "rivoractl --output=json destinations list"},
		{"global between path elements", "rivoractl destinations --server S get ID -o json", "rivoractl --server S -o json destinations get ID"},
		{"global before command", "rivoractl --server S events get E", "rivoractl --server S events get E"},
		{"aliases", "rivoractl dest rm ID --force", "rivoractl dest rm --force ID"},
		{"mixed", "rivoractl destinations update ID --rate 5 -o json --window 24h",
			"rivoractl -o json destinations update --rate 5 --window 24h ID"},
		{"publish short flags", "rivoractl publish -d orders -c acme --data @- -o json",
			"rivoractl -o json publish -d orders -c acme --data @-"},
		{"double dash", "rivoractl events get -o json -- -odd-id", "rivoractl -o json events get -- -odd-id"},
		{"global after double dash is positional", "rivoractl events get -- -o json", "rivoractl events get -- -o json"},
		{"unknown command keeps globals", "rivoractl bogus -o json", "rivoractl -o json bogus"},
		{"value equal to a command name", "rivoractl -o destinations list", "rivoractl -o destinations list"},
		{"a flag-like argument after --", "rivoractl destinations create --url U -- --bogus", "rivoractl destinations create --url U -- --bogus"},
		{"help wins", "rivoractl destinations update x --rate 5 --help", "rivoractl destinations update --help"},
		{"short help", "rivoractl -h", "rivoractl --help"},
		{"help on parent", "rivoractl destinations -h", "rivoractl destinations --help"},
		{"help=false is not help", "rivoractl destinations get x --help=false", "rivoractl destinations get --help=false x"},
		{"program only", "rivoractl", "rivoractl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := normalizeArgs(testApp(), strings.Fields(tt.in))
			if err != nil {
				t.Fatalf("normalizeArgs(%q): %v", tt.in, err)
			}
			if strings.Join(got, " ") != tt.want {
				t.Fatalf("normalizeArgs(%q) = %q, want %q", tt.in, strings.Join(got, " "), tt.want)
			}
		})
	}
}

func TestNormalizeArgsMissingValue(t *testing.T) {
	for _, in := range []string{
		"rivoractl destinations create ID --url",
		"rivoractl destinations list -o",
		"rivoractl --server",
		"rivoractl destinations --server",
	} {
		_, err := normalizeArgs(testApp(), strings.Fields(in))
		var u *usageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), "flag needs an argument") {
			t.Errorf("normalizeArgs(%q) err = %v, want a usage error about the missing value", in, err)
		}
	}
}

func sameTokens(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func fuzzTokens(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, " ")
}

func FuzzReorderArgs(f *testing.F) {
	for _, seed := range []string{
		"", "ID --url U", "a -- --url U", "--url -- a", "- --data x", "--url", "a --force=1 b -o json",
		"---x -y= --=z -", "a  b", "-- --", "--rate -5 -o -- x",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in := fuzzTokens(s)
		out := reorderArgs(in, testTakesValue)
		if !sameTokens(in, out) {
			t.Fatalf("reorderArgs(%q) = %q: tokens added or dropped", in, out)
		}
		flags, pos, dashdash, dangling := splitArgs(in, testTakesValue)
		if dangling {
			return
		}
		// Reordering is a fixed point, and parsing the result finds the
		// same flags and positionals.
		if again := reorderArgs(out, testTakesValue); !slices.Equal(again, out) {
			t.Fatalf("reorderArgs not idempotent: %q -> %q -> %q", in, out, again)
		}
		flags2, pos2, dashdash2, _ := splitArgs(out, testTakesValue)
		if !slices.EqualFunc(flags, flags2, func(a, b flagArg) bool { return a.name == b.name && slices.Equal(a.tokens, b.tokens) }) ||
			!slices.Equal(pos, pos2) || dashdash != dashdash2 {
			t.Fatalf("reorderArgs(%q) = %q changes the parse", in, out)
		}
		// Every flag precedes every positional.
		n := 0
		for _, f := range flags {
			n += len(f.tokens)
		}
		if !slices.Equal(out[n:], append(dashPrefix(dashdash), pos...)) {
			t.Fatalf("reorderArgs(%q) = %q: positionals not after flags", in, out)
		}
	})
}

func dashPrefix(dashdash bool) []string {
	if dashdash {
		return []string{"--"}
	}
	return []string{}
}

func FuzzNormalizeArgs(f *testing.F) {
	for _, seed := range []string{
		"destinations create ID --url U", "destinations list -o json", "-o json events get E",
		"publish --data @- -d x", "destinations -- -o", "bogus --server", "dest rm --force x -h",
	} {
		f.Add(seed)
	}
	app := testApp()
	f.Fuzz(func(t *testing.T, s string) {
		in := append([]string{"rivoractl"}, fuzzTokens(s)...)
		out, err := normalizeArgs(app, in)
		if err != nil {
			return
		}
		if out[0] != "rivoractl" {
			t.Fatalf("normalizeArgs(%q) = %q: program name moved", in, out)
		}
		if sameTokens(in, out) {
			return
		}
		// Only a help request may change the tokens: it becomes the
		// program, the command path and --help.
		if out[len(out)-1] != "--help" || !slices.ContainsFunc(in, func(tok string) bool {
			return isFlagToken(tok) && isHelpFlag(flagArg{name: func() string { n, _ := flagName(tok); return n }(), tokens: []string{tok}})
		}) {
			t.Fatalf("normalizeArgs(%q) = %q: tokens added or dropped", in, out)
		}
		for _, tok := range out[1 : len(out)-1] {
			if !slices.Contains(in, tok) {
				t.Fatalf("normalizeArgs(%q) = %q: help request invented %q", in, out, tok)
			}
		}
	})
}
