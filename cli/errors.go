package cli

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	"github.com/rivora/rivora/internal/errkind"
)

// usageError is a mistake on the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// limitFlag reads --limit, 1 to most; anything else is a usage error
// naming the range (never a silent default, never a value cut to 32 bits).
func limitFlag(c *ucli.Context, most int) (int32, error) {
	n := c.Int("limit")
	if n < 1 || n > most {
		return 0, usagef("--limit %d: use 1 to %d", n, most)
	}
	return int32(n), nil
}

// apiError is a failed call to the server: what was being done, the error,
// and per-code advice specific to the command.
type apiError struct {
	op    string
	err   error
	hints map[connect.Code]string
}

func (e *apiError) Error() string { return e.op + ": " + e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

func callFailed(op string, err error, hints map[connect.Code]string) error {
	return &apiError{op: op, err: err, hints: hints}
}

// describe turns an error into the one line rivoractl prints: what went
// wrong and what to do about it. Connect codes are translated here, in one
// place, so every command words them the same way. tokenSource says where
// the token sent came from ("" when none was).
func describe(err error, server, tokenSource string) string {
	var u *usageError
	if errors.As(err, &u) {
		return u.msg
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		return err.Error()
	}
	code := connect.CodeOf(ae.err)
	msg := ae.err.Error()
	var ce *connect.Error
	if errors.As(ae.err, &ce) {
		msg = ce.Message()
	}
	var text string
	var notAPI *notAPIError
	switch {
	case errors.As(ae.err, &notAPI):
		text = describeNotAPI(notAPI, server)
	case lostConnection(ae.err) && code != connect.CodeCanceled:
		text = fmt.Sprintf("lost the connection to the control plane (or agent) at %s mid-answer: it stopped or restarted", server)
	default:
		text = describeCode(code, msg, ae, server, tokenSource)
	}
	if hint := ae.hints[code]; hint != "" && !alreadySays(text, hint) {
		text += "; " + hint
	}
	return ae.op + ": " + text
}

// lostConnection reports whether err is a connection that broke while
// the server answered (its process died: the answer ends mid-message),
// which connect reports as a protocol error.
func lostConnection(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// describeCode says what a Connect code and the server's message mean.
func describeCode(code connect.Code, msg string, ae *apiError, server, tokenSource string) string {
	var text string
	switch code {
	case connect.CodeUnavailable:
		if strings.Contains(msg, "server gave HTTP response to HTTPS client") {
			text = fmt.Sprintf("Rivora at %s answers plain HTTP, not HTTPS: use an http:// URL in --server (or RIVORA_SERVER)", server)
		} else if leader := errkind.Leader(ae.err); leader != "" {
			// Retrying the follower never succeeds.
			text = fmt.Sprintf("Rivora at %s is not the leading control plane; the leader is %s: use --server %s (or RIVORA_SERVER)", server, leader, leader)
		} else if isTransport(ae.err) {
			text = fmt.Sprintf("cannot reach Rivora at %s: is it running (`rivora dev`, or the control plane or agent that --server names)? (set --server or RIVORA_SERVER to point elsewhere; %s)", server, msg)
		} else {
			text = fmt.Sprintf("Rivora at %s is unavailable: %s", server, msg)
			if !saysRetry(msg) {
				text += "; try again shortly"
			}
		}
	case connect.CodeDeadlineExceeded:
		text = fmt.Sprintf("Rivora at %s did not answer in time: %s; check that it is healthy and try again", server, msg)
	case connect.CodeCanceled:
		text = "interrupted before Rivora answered"
	case connect.CodeUnimplemented:
		text = fmt.Sprintf("the server at %s does not serve this call (%s): in a cell, publish goes to an agent (or an edge, which serves publish only) and every other command to the control plane; `rivora dev` serves both", server, msg)
		if root, path := splitPath(server); path != "" {
			text += fmt.Sprintf("; and Rivora serves its API at the root of its address, not under %s: use --server %s", path, root)
		}
	case connect.CodeInvalidArgument:
		text = "invalid request: " + msg
		if md, ok := errkind.Info(ae.err, errkind.InvalidLimitReason); ok && flagOfLimit[md["field"]] != "" {
			// The server names the API's field; the user typed a flag.
			text = fmt.Sprintf("invalid request: %s must be %s, got %s", flagOfLimit[md["field"]], md["bound"], md["got"])
		}
	case connect.CodeNotFound, connect.CodeAlreadyExists, connect.CodeFailedPrecondition:
		text = msg
	case connect.CodeUnauthenticated:
		text = fmt.Sprintf("%s (%s)", msg, code)
		if hint := tokenHint(tokenSource, msg); hint != "" {
			text += "; " + hint
		}
	case connect.CodeResourceExhausted:
		text = describeExhausted(msg, ae, server)
	case connect.CodePermissionDenied:
		// The server names the token, its role and what it lacks; for a
		// role's refusal, the call by its RPC path, which the user did
		// not type: what was refused is the operation the answer starts
		// with (ae.op), the call one command made (listen's look-up of
		// a destination, say), not always the whole command.
		md, ok := errkind.Info(ae.err, errkind.RoleNotAllowedReason)
		if ok && md["allowed"] != "" && md["role"] != "" {
			text = fmt.Sprintf("needs a token with role %s; this token's role is %s", orList(md["allowed"]), md["role"])
		} else {
			text = fmt.Sprintf("%s (%s)", msg, code)
		}
	default:
		text = fmt.Sprintf("server error (%s): %s", code, msg)
	}
	return text
}

// describeExhausted tells a refusal for a cap (a quota, a size: sent
// again, it is refused again) from back-pressure (the server is busy,
// its disk low, an edge's buffer full: it gets through later). Rivora's
// refusals for a cap carry an ErrorInfo reason; connect's own read limit,
// answered before Rivora reads the request, only its message.
func describeExhausted(msg string, ae *apiError, server string) string {
	_, limit := errkind.Info(ae.err, errkind.LimitReachedReason)
	_, tooLarge := errkind.Info(ae.err, requestTooLargeReason)
	switch {
	case strings.Contains(msg, "larger than configured max"):
		text := fmt.Sprintf("the request is larger than Rivora at %s reads (%s)", server, msg)
		if strings.Contains(ae.op, "publish") {
			text += ": an event's payload may be at most the server's --max-payload (256 KiB by default), a batch its --max-batch-bytes"
		}
		return text
	case limit || tooLarge:
		return "refused: limit reached (trying again will not help): " + msg
	}
	text := fmt.Sprintf("server busy (Rivora at %s): %s", server, msg)
	if !saysRetry(msg) {
		text += "; try again later"
	}
	return text
}

// orList writes the server's list "admin, operator, viewer" as "admin,
// operator or viewer".
func orList(list string) string {
	if i := strings.LastIndex(list, ", "); i >= 0 {
		return list[:i] + " or " + list[i+2:]
	}
	return list
}

// requestTooLargeReason is agent/ingest's RequestTooLargeReason (a
// request whose deliveries would take too much room), in errkind.Domain;
// rivoractl does not import the agent.
const requestTooLargeReason = "REQUEST_TOO_LARGE"

// saysRetry reports whether the server's message already says to try
// again ("retry", "try again").
func saysRetry(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "retry") || strings.Contains(m, "try again")
}

// alreadySays reports whether the server's message already tells what to
// do: it names a rivoractl command, or a flag the hint names.
func alreadySays(text, hint string) bool {
	if strings.Contains(text, "rivoractl ") {
		return true
	}
	for _, word := range strings.Fields(hint) {
		if flag := strings.TrimRight(word, ",.;:)"); strings.HasPrefix(flag, "--") && strings.Contains(text, flag) {
			return true
		}
	}
	return false
}

// tokenHint says how to authenticate after the server refused the call as
// unauthenticated: no token was sent, or the one sent is unknown, revoked
// or expired. What the server already said (msg) is not repeated.
func tokenHint(tokenSource, msg string) string {
	how := "pass --token, RIVORA_TOKEN or --token-file (rivora dev wrote an admin token to <data-dir>/admin.token, ./data/admin.token by default; a cell's control plane to <state-dir>/admin.token)"
	if strings.HasSuffix(tokenSource, "admin.token") {
		// The one rivora dev wrote was refused: it was revoked.
		how = "pass --token, RIVORA_TOKEN or --token-file with another token (an admin token rivora dev or a control plane wrote stops working once revoked; another admin creates one with `rivoractl tokens create --role admin`)"
	}
	if strings.Contains(msg, "--token-file") {
		how = ""
	}
	if tokenSource == "" {
		return how
	}
	refused := "the token from " + tokenSource + " was refused"
	if !strings.Contains(msg, "mistyped") {
		refused += " (mistyped, revoked or expired?)"
	}
	if how == "" {
		return refused
	}
	return refused + ": " + how
}

// isTransport reports whether err is a failure to talk to the server at
// all (connection refused, DNS, reset), as opposed to the server answering
// that it is unavailable.
func isTransport(err error) bool {
	var opErr *net.OpError
	var urlErr *url.Error
	var dnsErr *net.DNSError
	return errors.As(err, &opErr) || errors.As(err, &urlErr) || errors.As(err, &dnsErr)
}

// flagOfLimit names the flags of destinations create/update and limits set
// for the Limits fields a server's InvalidLimitReason names.
var flagOfLimit = map[string]string{
	"rate_per_second": "--rate",
	"burst":           "--burst",
	"max_attempts":    "--max-attempts",
	"window":          "--window",
	"timeout":         "--timeout",
	"max_in_flight":   "--max-in-flight",
}
