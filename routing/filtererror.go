package routing

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/google/cel-go/cel"
	"golang.org/x/text/width"
)

// maxShownErrors bounds the compile errors a refusal shows: the first
// ones are the causes, the rest most often follow from them.
const maxShownErrors = 3

// operandSet is what CEL's parser lists as expected where a value
// belongs: a user reads it as "a value".
const operandSet = "{'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}"

// filterCompileError says where a filter does not compile in terms its author
// can relate to the filter: the column (and line, when it has several)
// counted in characters from 1, and the filter's line quoted with a
// caret under that column. CEL's own text named the filter "<input>",
// drew a row of dots to the caret, two columns wide under every
// non-ASCII character (so after "café" the caret stood right of the
// error), and listed the parser's token names.
func filterCompileError(source string, iss *cel.Issues) error {
	errs := slices.Clone(iss.Errors())
	if len(errs) == 0 {
		return fmt.Errorf("filter does not compile: %w", iss.Err())
	}
	slices.SortStableFunc(errs, func(a, b *cel.Error) int {
		return cmp.Or(cmp.Compare(a.Location.Line(), b.Location.Line()), cmp.Compare(a.Location.Column(), b.Location.Column()))
	})
	lines := strings.Split(source, "\n")
	var b strings.Builder
	b.WriteString("filter does not compile")
	for i, e := range errs {
		if i == maxShownErrors {
			fmt.Fprintf(&b, "\n(and %d more)", len(errs)-i)
			break
		}
		if i > 0 {
			b.WriteString("\nand")
		}
		writeCompileError(&b, lines, e)
	}
	return errors.New(b.String())
}

// writeCompileError writes one error: where, what, and the line quoted
// with its caret. A location outside the filter is left out.
func writeCompileError(b *strings.Builder, lines []string, e *cel.Error) {
	line, col := e.Location.Line(), e.Location.Column() // line from 1, column from 0, in characters
	msg := plainCompileMessage(e.Message)
	if line < 1 || line > len(lines) || col < 0 {
		fmt.Fprintf(b, ": %s", msg)
		return
	}
	text := []rune(lines[line-1])
	col = min(col, len(text))
	if len(lines) > 1 {
		fmt.Fprintf(b, " at line %d, column %d", line, col+1)
	} else {
		fmt.Fprintf(b, " at column %d", col+1)
	}
	if line == len(lines) && col == len(text) {
		b.WriteString(" (the end of the filter)")
	}
	fmt.Fprintf(b, ": %s\n    %s\n    %s^", msg, string(text), caretIndent(text[:col]))
}

// caretIndent is blank space as wide as before is on a terminal: a tab
// stays a tab, a wide (East Asian) character takes two columns, a
// combining mark none.
func caretIndent(before []rune) string {
	var b strings.Builder
	for _, r := range before {
		switch {
		case r == '\t':
			b.WriteRune('\t')
		case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf):
		case wide(r):
			b.WriteString("  ")
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()
}

func wide(r rune) bool {
	k := width.LookupRune(r).Kind()
	return k == width.EastAsianWide || k == width.EastAsianFullwidth
}

// plainCompileMessage is a CEL compile message in a filter author's
// words where CEL's speak of its parser: the end of the filter, a value,
// operators as written ('+', not '_+_').
func plainCompileMessage(msg string) string {
	msg = strings.Replace(msg, "Syntax error: ", "syntax error: ", 1)
	msg = strings.Replace(msg, "mismatched input '<EOF>' expecting", "the filter ends where it expects", 1)
	msg = strings.ReplaceAll(msg, "expecting <EOF>", "expecting the end of the filter")
	msg = strings.ReplaceAll(msg, "'<EOF>'", "the end of the filter")
	msg = strings.ReplaceAll(msg, operandSet, "a value (a field such as data.amount, a literal, '(' or '!')")
	msg = celOperator.ReplaceAllString(msg, "'$1$2'")
	if strings.HasPrefix(msg, "undeclared reference to ") {
		msg = strings.TrimSuffix(msg, " (in container '')") + ": a filter reads data, type, customer and lane"
	}
	return msg
}

// celOperator is an operator's name in CEL's messages: '_+_', '!_', '-_'.
var celOperator = regexp.MustCompile(`'_?([^'\w\s]+)_(?:([^'\w\s]+)_)?'`)
