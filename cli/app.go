// Package cli implements rivoractl, the operator's command line for Rivora.
// It talks to Rivora only through the public Connect API (AdminService,
// IngestService through the Go SDK, EventService) in binary protobuf, so
// everything it does can be done by any other client. One file per command
// group; this file holds the application, its global flags (server, token,
// TLS) and the error and exit-code policy.
package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/buildinfo"
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
// streams and returns the exit code. The first Ctrl-C cancels the running
// call, and a long-running command (listen, replay, --wait) stops
// gracefully, saying how; a second one stops rivoractl at once
// (interrupt.go).
func Run(args []string) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	intr := newInterrupt()
	code := make(chan int, 1)
	go func() { code <- runContext(ctx, intr, args, os.Stdin, os.Stdout, os.Stderr) }()
	return awaitExit(code, sigs, cancel, intr, os.Stderr)
}

// RunContext is Run with explicit context and streams. Results go to
// stdout; a failure is one line on stderr, "rivoractl: <what and what to
// do>", and a non-zero exit code: 2 for usage errors, 1 otherwise.
func RunContext(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runContext(ctx, nil, args, stdin, stdout, stderr)
}

// runContext is RunContext with Run's Ctrl-C: ctx ends at the first, intr
// (nil: none) tells of the second.
func runContext(ctx context.Context, intr *interrupt, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	e := &env{in: stdin, out: stdout, errOut: stderr, args: args, intr: intr}
	app := e.newApp(stdout, stderr)
	args, err := normalizeArgs(app, args)
	if err == nil {
		err = app.RunContext(ctx, args)
	}
	if err == nil {
		return exitOK
	}
	// The server's words may quote what a customer wrote (visibleText).
	fmt.Fprintf(stderr, "rivoractl: %s\n", visibleText(describe(err, e.server, e.tokenSource)))
	var u *usageError
	if errors.As(err, &u) {
		return exitUsage
	}
	return exitError
}

// env is what commands share: the streams and, once the global flags are
// parsed, the server to talk to and how to authenticate to it.
type env struct {
	in     io.Reader
	out    io.Writer
	errOut io.Writer
	server string
	output string
	http   *http.Client
	// token is the API token every call sends; tokenSource says where it
	// came from ("--token", "RIVORA_TOKEN", "--token-file PATH"), "" when
	// none was given.
	token       string
	tokenSource string
	// args is the command line, to tell a flag from its environment
	// variable in errors.
	args []string
	// intr is Run's second Ctrl-C (nil: none, RunContext).
	intr *interrupt
}

func (e *env) newApp(stdout, stderr io.Writer) *ucli.App {
	app := &ucli.App{
		Name:  "rivoractl",
		Usage: "manage Rivora destinations and subscriptions, publish events and follow their delivery",
		UsageText: `rivoractl [--server URL] [--token T | --token-file F] [--ca-file PEM] [-o table|json] COMMAND [ARGS] [FLAGS]

Flags may come before or after arguments; global flags may come anywhere.
An argument that starts with '-' goes after "--": rivoractl destinations get -- -x`,
		Description: `rivoractl talks to a Rivora control plane or agent over its public Connect
API. Every call carries an API token (Authorization: Bearer): pass it with
--token, RIVORA_TOKEN or --token-file. Start Rivora locally with
` + "`rivora dev`" + `; on its first start it writes an admin token to
<data-dir>/admin.token (./data/admin.token by default), then:

   export RIVORA_TOKEN=$(cat ./data/admin.token)
   rivoractl destinations create orders --url http://127.0.0.1:9000/hook
   rivoractl listen --destination orders    # a local receiver: each delivery as it arrives, verified
   rivoractl publish --destination orders --customer acme --lane user-42 \
       --type order.created --data '{"order": 1}'
   rivoractl events get EVENT_ID
   rivoractl destinations list -o json

Customers' events can also fan out: publish without --destination and each
of the customer's matching subscriptions gets its own delivery:

   rivoractl subscriptions create --customer acme --destination orders --types 'order.*'
   rivoractl publish --customer acme --lane user-42 --type order.created --data '{"order": 1}'

Ctrl-C stops a command. One that runs on stops gracefully and says how:
listen waits a few seconds for the requests it is answering, replay says
how far it got (the same command again resumes), --wait that the change is
made. A second Ctrl-C stops rivoractl at once (exit code 130).`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{
				Name:    "server",
				Usage:   "Rivora `URL` (control plane or agent)",
				EnvVars: []string{"RIVORA_SERVER"},
				Value:   DefaultServer,
			},
			&ucli.StringFlag{
				Name:    "token",
				Usage:   "API `TOKEN` sent on every call (Authorization: Bearer); the audit log names it. Prefer RIVORA_TOKEN or --token-file: a flag shows in the process list",
				EnvVars: []string{"RIVORA_TOKEN"},
			},
			&ucli.StringFlag{
				Name:    "token-file",
				Usage:   "read the API token from `FILE` (surrounding space trimmed), e.g. <data-dir>/admin.token of `rivora dev`",
				EnvVars: []string{"RIVORA_TOKEN_FILE"},
			},
			&ucli.StringFlag{
				Name:    "ca-file",
				Usage:   "verify the server's TLS certificate (https:// --server) against the CA certificates in `PEM` instead of the system's",
				EnvVars: []string{"RIVORA_CA_FILE"},
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
			e.edgesCommand(),
			e.dlqCommand(),
			e.replayCommand(),
			e.tokensCommand(),
			e.subscriptionsCommand(),
			e.eventTypesCommand(),
			e.listenCommand(),
		},
		Before:    e.before,
		Action:    rootAction,
		Writer:    stdout,
		ErrWriter: stderr,
		Version:   buildinfo.Version(),
		// Errors are reported once, by RunContext; never exit from inside.
		ExitErrHandler: func(*ucli.Context, error) {},
		OnUsageError:   onUsageError,
	}
	setUsageErrorHandlers(app.Commands)
	noHelpCommandOnLeaves(app.Commands)
	return app
}

// noHelpCommandOnLeaves stops urfave/cli from giving a command without
// subcommands a "help" subcommand (alias "h"): on such a command every
// positional is an argument, and `destinations create h --url …` would
// print help and exit 0 without creating "h". Help stays a flag there
// (-h, --help); commands with subcommands keep `help SUBCOMMAND`.
func noHelpCommandOnLeaves(cmds []*ucli.Command) {
	for _, c := range cmds {
		if len(c.Subcommands) == 0 {
			c.HideHelpCommand = true
		}
		noHelpCommandOnLeaves(c.Subcommands)
	}
}

// before validates the global flags and prepares the HTTP client and the
// token.
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
	if err := e.readToken(c); err != nil {
		return err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// A custom TLS config turns off net/http's automatic HTTP/2; Rivora
	// serves Connect and gRPC over HTTP/2 with TLS, so ask for it.
	transport.ForceAttemptHTTP2 = true
	if path := c.String("ca-file"); path != "" {
		cfg, err := caConfig(path)
		if err != nil {
			return err
		}
		transport.TLSClientConfig = cfg
	}
	e.http = &http.Client{Transport: apiOnly{next: transport}}
	return nil
}

// readToken takes the token from --token (or RIVORA_TOKEN) or from
// --token-file (or RIVORA_TOKEN_FILE). A flag on the command line wins over
// the other's environment variable, as a flag wins over its own; two given
// the same way (both flags, or both variables) are refused: which should
// win would be a guess the user does not see.
func (e *env) readToken(c *ucli.Context) error {
	token, path := c.String("token"), c.String("token-file")
	if token != "" && path != "" {
		tokenOnLine, fileOnLine := e.onLine("token"), e.onLine("token-file")
		switch {
		case tokenOnLine && !fileOnLine:
			path = ""
		case fileOnLine && !tokenOnLine:
			token = ""
		default:
			return usagef("%s and %s are both set: give the token one way only", e.source("token", "RIVORA_TOKEN"), e.source("token-file", "RIVORA_TOKEN_FILE"))
		}
	}
	if token != "" {
		e.token, e.tokenSource = strings.TrimSpace(token), e.source("token", "RIVORA_TOKEN")
		if e.token == "" {
			return usagef("%s is blank: pass an API token", e.tokenSource)
		}
		return e.checkTokenText()
	}
	if path == "" {
		return nil
	}
	e.tokenSource = e.source("token-file", "RIVORA_TOKEN_FILE") + " " + path
	data, err := os.ReadFile(path)
	if err != nil {
		return usagef("%s: %v", e.tokenSource, err)
	}
	e.token = strings.TrimSpace(string(data))
	if e.token == "" {
		return usagef("%s is empty: it should hold an API token (`rivoractl tokens create` prints one)", e.tokenSource)
	}
	return e.checkTokenText()
}

// checkTokenText refuses a token no server could be sent: one with a
// space, a line break or another control character inside (two tokens
// pasted together, a file of several lines). Sent anyway, the HTTP
// client refuses the header, which would read as a server that is down.
func (e *env) checkTokenText() error {
	i := strings.IndexFunc(e.token, func(r rune) bool { return r <= ' ' || r == 0x7f })
	if i < 0 {
		return nil
	}
	return usagef("%s has a space, line break or control character inside (at byte %d): a token is one word on one line, as `rivoractl tokens create` printed it", e.tokenSource, i)
}

// onLine reports whether global flag name is on the command line
// (urfave/cli's IsSet is also true when it came from its environment
// variable).
func (e *env) onLine(name string) bool {
	for _, a := range e.args[min(1, len(e.args)):] {
		if a == "--" {
			return false
		}
		if isFlagToken(a) {
			if n, _ := flagName(a); n == name {
				return true
			}
		}
	}
	return false
}

// source names where a global flag's value came from: the flag or its
// environment variable.
func (e *env) source(name, envVar string) string {
	if !e.onLine(name) && os.Getenv(envVar) != "" {
		return envVar
	}
	return "--" + name
}

// caConfig is a TLS config trusting only the CA certificates in path.
func caConfig(path string) (*tls.Config, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--ca-file: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usagef("--ca-file %s: no PEM certificate in it (want the CA that signed the server's certificate, BEGIN CERTIFICATE)", path)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// clientOptions are what every Connect client of the CLI is built with: the
// bearer token on every call.
func (e *env) clientOptions() []connect.ClientOption {
	return []connect.ClientOption{connect.WithInterceptors(auth.Bearer(e.token))}
}

func (e *env) admin() rivorav1connect.AdminServiceClient {
	return rivorav1connect.NewAdminServiceClient(e.http, e.server, e.clientOptions()...)
}

func (e *env) events() rivorav1connect.EventServiceClient {
	return rivorav1connect.NewEventServiceClient(e.http, e.server, e.clientOptions()...)
}

func (e *env) tokens() rivorav1connect.TokenServiceClient {
	return rivorav1connect.NewTokenServiceClient(e.http, e.server, e.clientOptions()...)
}

func (e *env) subscriptions() rivorav1connect.SubscriptionServiceClient {
	return rivorav1connect.NewSubscriptionServiceClient(e.http, e.server, e.clientOptions()...)
}

func (e *env) eventTypes() rivorav1connect.EventTypeServiceClient {
	return rivorav1connect.NewEventTypeServiceClient(e.http, e.server, e.clientOptions()...)
}

// callContext bounds one command's calls to the server.
func callContext(c *ucli.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Context, requestTimeout)
}

// rootAction runs when no command was given or an unknown one was: a
// usage error either way (a command line that did nothing never exits 0),
// after the help when none was given. --help is the way to ask for it.
func rootAction(c *ucli.Context) error {
	if c.Args().Present() {
		return usagef("unknown command %q: see `rivoractl --help`", c.Args().First())
	}
	if err := ucli.ShowAppHelp(c); err != nil {
		return err
	}
	return usagef("no command given: pick one of the commands above (help: `rivoractl --help`)")
}

// parentAction runs for a command that has subcommands when none was given
// or an unknown one was: a usage error, as for rootAction.
func parentAction(c *ucli.Context) error {
	if c.Args().Present() {
		return usagef("unknown command %q: see `%s --help`", c.Args().First(), c.Command.HelpName)
	}
	if err := ucli.ShowSubcommandHelp(c); err != nil {
		return err
	}
	return usagef("%s needs a command: pick one of the commands above (help: `%s --help`)", c.Command.HelpName, c.Command.HelpName)
}

func onUsageError(c *ucli.Context, err error, _ bool) error {
	name := "rivoractl"
	if c.Command != nil && c.Command.HelpName != "" {
		name = c.Command.HelpName
	}
	// The flag package names a flag with one dash ("flag -rate"); the
	// help and every example use two.
	msg := strings.Replace(err.Error(), "for flag -", "for flag --", 1)
	// The flag package's "parse error" says nothing of the form it wants.
	if want := flagForm(c, msg); want != "" && strings.HasSuffix(msg, ": parse error") {
		msg = strings.TrimSuffix(msg, "parse error") + want
	}
	return usagef("%s: see `%s --help`", msg, name)
}

// flagForm says what the flag msg names ("invalid value … for flag
// --NAME: …") wants, by its type ("" when not known).
func flagForm(c *ucli.Context, msg string) string {
	_, rest, ok := strings.Cut(msg, "for flag --")
	if !ok || c.Command == nil {
		return ""
	}
	name, _, _ := strings.Cut(rest, ":")
	for _, f := range c.Command.Flags {
		if !slices.Contains(f.Names(), name) {
			continue
		}
		switch f.(type) {
		case *ucli.DurationFlag:
			return "not a duration: use a number with a unit, such as 30s, 5m or 72h"
		case *ucli.IntFlag, *ucli.Int64Flag, *ucli.UintFlag, *ucli.Uint64Flag:
			return "not a whole number"
		case *ucli.Float64Flag:
			return "not a number"
		}
	}
	return ""
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
