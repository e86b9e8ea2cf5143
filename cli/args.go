package cli

import (
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// urfave/cli (like Go's flag package) stops parsing flags at the first
// positional argument, so `destinations create ID --url U` would leave --url
// unparsed. rivoractl instead accepts flags anywhere: before parsing, the
// arguments are rewritten so that every flag (with its value) precedes the
// positionals, and global flags precede the command path.

// flagArg is one flag as it appeared: its name and its tokens ("--url", "U",
// or just "--url=U" or "--force").
type flagArg struct {
	name   string
	tokens []string
}

// isFlagToken reports whether t looks like a flag. "-" alone is a positional
// (conventionally stdin) and "--" ends the flags.
func isFlagToken(t string) bool {
	return len(t) > 1 && t[0] == '-' && t != "--"
}

// flagName returns the name of a flag token ("-o", "--output=json" →
// "o", "output") and whether the token carries its value after "=".
func flagName(t string) (name string, inline bool) {
	n := strings.TrimPrefix(t[1:], "-")
	name, _, inline = strings.Cut(n, "=")
	return name, inline
}

// splitArgs separates args into flags (in order, each with its value when
// takesValue says the flag has one) and positionals (in order). Everything
// after "--" is positional, and dashdash reports that "--" was present. As in
// Go's flag package, a flag that takes a value consumes the next token
// whatever it looks like, "--" included. dangling is set when the last
// token is a flag that takes a value but none follows; it is the last
// element of flags.
func splitArgs(args []string, takesValue func(name string) bool) (flags []flagArg, positionals []string, dashdash, dangling bool) {
	for i := 0; i < len(args); i++ {
		t := args[i]
		if t == "--" {
			positionals = append(positionals, args[i+1:]...)
			return flags, positionals, true, false
		}
		if !isFlagToken(t) {
			positionals = append(positionals, t)
			continue
		}
		name, inline := flagName(t)
		f := flagArg{name: name, tokens: []string{t}}
		if !inline && takesValue(name) {
			if i+1 < len(args) {
				i++
				f.tokens = append(f.tokens, args[i])
			} else {
				dangling = true
			}
		}
		flags = append(flags, f)
	}
	return flags, positionals, false, dangling
}

// flagTable maps every name and alias of flags to whether the flag takes a
// value (everything but booleans does).
func flagTable(flags []ucli.Flag) map[string]bool {
	t := map[string]bool{}
	for _, f := range flags {
		_, isBool := f.(*ucli.BoolFlag)
		for _, n := range f.Names() {
			t[n] = !isBool
		}
	}
	return t
}

// isHelpFlag reports whether f asks for help: -h, --help or --help=true.
func isHelpFlag(f flagArg) bool {
	if f.name != "h" && f.name != "help" {
		return false
	}
	_, v, inline := strings.Cut(f.tokens[0], "=")
	return !inline || v == "true" || v == "1"
}

func findCommand(cmds []*ucli.Command, name string) *ucli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// normalizeArgs rewrites a full command line (args[0] is the program) for
// app into the order urfave/cli parses: program, global flags, command path,
// command flags, ["--"], positionals. Global flags may appear anywhere
// before "--", including after the command path.
func normalizeArgs(app *ucli.App, args []string) ([]string, error) {
	if len(args) == 0 {
		return args, nil
	}
	globals := flagTable(app.Flags)
	rest := args[1:]
	var globalTokens, path []string
	var leaf *ucli.Command
	cmds := app.Commands

	// Walk the command path, collecting global flags met on the way. Stop
	// at the first token that is neither: it belongs to the deepest command.
	i := 0
	for i < len(rest) && len(cmds) > 0 {
		t := rest[i]
		if isFlagToken(t) {
			name, inline := flagName(t)
			takesValue, ok := globals[name]
			if !ok {
				break
			}
			globalTokens = append(globalTokens, t)
			i++
			if takesValue && !inline {
				if i >= len(rest) {
					return nil, usagef("flag needs an argument: %s", t)
				}
				globalTokens = append(globalTokens, rest[i])
				i++
			}
			continue
		}
		cmd := findCommand(cmds, t)
		if cmd == nil {
			break
		}
		path = append(path, t)
		leaf = cmd
		cmds = cmd.Subcommands
		i++
	}

	local := map[string]bool{}
	if leaf != nil {
		local = flagTable(leaf.Flags)
	}
	takesValue := func(name string) bool {
		if v, ok := local[name]; ok {
			return v
		}
		return globals[name]
	}
	flags, positionals, dashdash, dangling := splitArgs(rest[i:], takesValue)
	if dangling {
		last := flags[len(flags)-1]
		return nil, usagef("flag needs an argument: %s", last.tokens[0])
	}
	// A help request wins over everything else on the line; urfave/cli
	// would otherwise read a positional as the help topic.
	for _, f := range flags {
		if isHelpFlag(f) {
			out := append([]string{args[0]}, path...)
			return append(out, "--help"), nil
		}
	}
	// A token that looks like a flag but is none of the command's is refused
	// here, with the way to pass it as an argument: ids may start with '-'.
	if leaf != nil {
		for _, f := range flags {
			_, isLocal := local[f.name]
			_, isGlobal := globals[f.name]
			if !isLocal && !isGlobal && f.name != "h" && f.name != "help" {
				cmd := strings.Join(append([]string{"rivoractl"}, path...), " ")
				if leaf.ArgsUsage == "" {
					return nil, usagef("unknown flag %s for `%s`: see `%s --help`", f.tokens[0], cmd, cmd)
				}
				return nil, usagef("unknown flag %s for `%s`, which takes %s as an argument (`%s %s`); an argument that starts with '-' goes after \"--\" (`%s [FLAGS] -- %s`); see `%s --help`",
					f.tokens[0], cmd, leaf.ArgsUsage, cmd, leaf.ArgsUsage, cmd, f.tokens[0], cmd)
			}
		}
	}
	var localTokens []string
	for _, f := range flags {
		_, isLocal := local[f.name]
		_, isGlobal := globals[f.name]
		if isGlobal && !isLocal {
			globalTokens = append(globalTokens, f.tokens...)
		} else {
			localTokens = append(localTokens, f.tokens...)
		}
	}

	out := make([]string, 0, len(args))
	out = append(out, args[0])
	out = append(out, globalTokens...)
	out = append(out, path...)
	out = append(out, localTokens...)
	if dashdash {
		out = append(out, "--")
	}
	return append(out, positionals...), nil
}
