// Package cli implements rivoractl, the operator's command line for Rivora.
// It talks to Rivora only through the public Connect API (AdminService,
// IngestService through the Go SDK, EventService) in binary protobuf, so
// everything it does can be done by any other client. One file per command
// group; this file holds the application, its global flags and the error
// and exit-code policy.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"os/user"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/rivora/rivora/internal/httpurl"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// DefaultServer is where `rivora dev` listens.
const DefaultServer = "http://127.0.0.1:7400"

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the server refused or could not be reached
	exitUsage = 2 // the command line is wrong
)

// requestTimeout bounds each command's calls to the server.
const requestTimeout = 30 * time.Second

// Run runs rivoractl with os.Args-style args on the process's standard
// streams and returns the exit code. Ctrl-C cancels the running call.
func Run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return RunContext(ctx, args, os.Stdin, os.Stdout, os.Stderr)
}

// RunContext is Run with explicit context and streams. Results go to
// stdout; a failure is one line on stderr, "rivoractl: <what and what to
// do>", and a non-zero exit code: 2 for usage errors, 1 otherwise.
func RunContext(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	e := &env{in: stdin, out: stdout, errOut: stderr}
	app := e.newApp(stdout, stderr)
	args, err := normalizeArgs(app, args)
	if err == nil {
		err = app.RunContext(ctx, args)
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "rivoractl: %s\n", describe(err, e.server))
	var u *usageError
	if errors.As(err, &u) {
		return exitUsage
	}
	return exitError
}

// env is what commands share: the streams and, once the global flags are
// parsed, the server to talk to.
type env struct {
	in     io.Reader
	out    io.Writer
	errOut io.Writer
	author string
	server string
	output string
	http   *http.Client
}

func (e *env) newApp(stdout, stderr io.Writer) *ucli.App {
	app := &ucli.App{
		Name:  "rivoractl",
		Usage: "manage Rivora destinations, publish events and follow their delivery",
		UsageText: `rivoractl [--server URL] [-o table|json] COMMAND [ARGS] [FLAGS]

Flags may come before or after arguments; global flags may come anywhere.`,
		Description: `rivoractl talks to a Rivora control plane or agent over its public Connect
API. Start one locally with ` + "`rivora dev`" + `, then:

   rivoractl destinations create orders --url https://example.com/hooks
   rivoractl publish --destination orders --customer acme --lane user-42 \
       --type order.created --data '{"order": 1}'
   rivoractl events get EVENT_ID
   rivoractl destinations list -o json`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{
				Name:    "server",
				Usage:   "Rivora `URL` (control plane or agent)",
				EnvVars: []string{"RIVORA_SERVER"},
				Value:   DefaultServer,
			},
			&ucli.StringFlag{
				Name:    "author",
				Usage:   "`NAME` recorded in the audit log for changes (default: $USER)",
				EnvVars: []string{"RIVORA_AUTHOR", "USER"},
			},
			&ucli.StringFlag{
				Name:    "output",
				Aliases: []string{"o"},
				Usage:   "output `FORMAT`: table (for people) or json (protojson, for scripts)",
				Value:   "table",
			},
		},
		Commands: []*ucli.Command{
			e.destinationsCommand(),
			e.publishCommand(),
			e.eventsCommand(),
			e.lanesCommand(),
			e.priorityCommand(),
			e.limitsCommand(),
			e.auditCommand(),
			e.agentsCommand(),
			e.dlqCommand(),
			e.replayCommand(),
		},
		Before:      e.before,
		Action:      rootAction,
		Writer:      stdout,
		ErrWriter:   stderr,
		HideVersion: true,
		// Errors are reported once, by RunContext; never exit from inside.
		ExitErrHandler: func(*ucli.Context, error) {},
		OnUsageError:   onUsageError,
	}
	setUsageErrorHandlers(app.Commands)
	return app
}

// before validates the global flags and prepares the HTTP client.
func (e *env) before(c *ucli.Context) error {
	e.output = c.String("output")
	if e.output != "table" && e.output != "json" {
		return usagef("-o %q: use -o table or -o json", e.output)
	}
	server := strings.TrimRight(c.String("server"), "/")
	if _, err := httpurl.Parse(server); err != nil {
		return usagef("--server %q is not a Rivora URL: use one like %s (or set RIVORA_SERVER)", c.String("server"), DefaultServer)
	}
	e.server = server
	e.http = &http.Client{}
	e.author = c.String("author")
	if e.author == "" {
		if u, err := user.Current(); err == nil {
			e.author = u.Username
		}
	}
	return nil
}

func (e *env) admin() rivorav1connect.AdminServiceClient {
	return rivorav1connect.NewAdminServiceClient(e.http, e.server)
}

func (e *env) events() rivorav1connect.EventServiceClient {
	return rivorav1connect.NewEventServiceClient(e.http, e.server)
}

// callContext bounds one command's calls to the server.
func callContext(c *ucli.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Context, requestTimeout)
}

// rootAction runs when no command was given (show help) or an unknown one
// was (usage error).
func rootAction(c *ucli.Context) error {
	if c.Args().Present() {
		return usagef("unknown command %q: see `rivoractl --help`", c.Args().First())
	}
	return ucli.ShowAppHelp(c)
}

// parentAction runs for a command that has subcommands when none was given
// (show help) or an unknown one was (usage error).
func parentAction(c *ucli.Context) error {
	if c.Args().Present() {
		return usagef("unknown command %q: see `%s --help`", c.Args().First(), c.Command.HelpName)
	}
	return ucli.ShowSubcommandHelp(c)
}

func onUsageError(c *ucli.Context, err error, _ bool) error {
	name := "rivoractl"
	if c.Command != nil && c.Command.HelpName != "" {
		name = c.Command.HelpName
	}
	return usagef("%v: see `%s --help`", err, name)
}

func setUsageErrorHandlers(cmds []*ucli.Command) {
	for _, c := range cmds {
		c.OnUsageError = onUsageError
		setUsageErrorHandlers(c.Subcommands)
	}
}

// exactArgs checks the number of positional arguments.
func exactArgs(c *ucli.Context, n int, what string) error {
	if c.NArg() != n {
		return usagef("%s takes %s, got %d argument(s): see `%s --help`", c.Command.HelpName, what, c.NArg(), c.Command.HelpName)
	}
	return nil
}
