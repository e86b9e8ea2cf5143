package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/durations"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// roleNames are the roles as the CLI spells them, for help and errors.
const roleNames = "admin, operator, viewer, publisher or customer"

func (e *env) tokensCommand() *ucli.Command {
	return &ucli.Command{
		Name:    "tokens",
		Aliases: []string{"token"},
		Usage:   "create, list and revoke the API tokens every call is made with (admin only)",
		Description: `Every call to Rivora carries an API token (Authorization: Bearer), and the
token's role decides what the call may do:

   admin      everything, tokens and destinations included
   operator   steering (limits, priorities, pause/resume, replay, lane skip,
              resend) and every read; no destination create/delete, no tokens
   viewer     every read, nothing else
   publisher  publish, and read its own events and dead letters, for the
              customers it names (--customer, or '*' for any)
   customer   self-service for the customers it names (--customer): publish;
              manage their subscriptions and the destinations they own; read
              and replay their own events, lanes and dead letters. It never
              sees another customer's anything

Rivora keeps only each token's hash: a token is shown once, by create.

Examples:
   rivoractl tokens create --name ci-deploy --role operator --ttl 90d
   rivoractl tokens create --name acme-app --role publisher --customer acme
   rivoractl tokens create --name acme-portal --role customer --customer acme
   rivoractl tokens list
   rivoractl tokens revoke tok_0123456789abcdef`,
		Action: parentAction,
		Subcommands: []*ucli.Command{
			e.tokensCreate(),
			e.tokensList(),
			e.tokensRevoke(),
		},
	}
}

func (e *env) tokensCreate() *ucli.Command {
	return &ucli.Command{
		Name:      "create",
		Usage:     "create an API token and print it, once",
		UsageText: "rivoractl tokens create --name NAME --role admin|operator|viewer|publisher|customer [--customer C]... [--ttl 90d] [--wait] [-o json]",
		Description: `Creates a token with a role and prints it. The token is shown only this
once (Rivora keeps its hash): store it where it will be used now. Audit
entries of changes made with it name NAME and the token's id.

A publisher token is limited to the customers it names: repeat --customer
for several, or pass --customer '*' for any. A customer token (self-service:
the console's customer portal, a customer's own scripts) names its customers
the same way, '*' excepted. The other roles act for every customer and take
no --customer.

--ttl makes the token expire by itself (a Go duration such as 720h, or
whole days such as 90d); without it the token lasts until revoked.

-o json prints {"id", "name", "role", "customers", "expiresAt", "token"}
(expiresAt RFC 3339, or null when the token does not expire).

Examples:
   rivoractl tokens create --name ci-deploy --role operator --ttl 90d
   rivoractl tokens create --name acme-app --role publisher --customer acme --customer acme-eu
   rivoractl tokens create --name acme-portal --role customer --customer acme
   RIVORA_TOKEN=$(rivoractl tokens create --name dash --role viewer -o json | jq -r .token)`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "name", Usage: "`NAME` of the token, for people and the audit log (required)"},
			&ucli.StringFlag{Name: "role", Usage: "`ROLE`: " + roleNames + " (required)"},
			&ucli.StringSliceFlag{Name: "customer", Usage: "publisher and customer tokens: customer `ID` the token may act for (repeat for several; '*' for any, publishers only)"},
			&ucli.StringFlag{Name: "ttl", Usage: "expire the token after `DURATION` (720h, 90d)", DefaultText: "never"},
			waitFlag(),
		},
		Action: e.createToken,
	}
}

// createTokenRequest checks the command line and builds the request, so a
// mistake is reported before anything reaches the server.
func createTokenRequest(c *ucli.Context) (*rivorav1.CreateTokenRequest, error) {
	name := strings.TrimSpace(c.String("name"))
	if name == "" {
		return nil, usagef("tokens create needs --name NAME: see `rivoractl tokens create --help`")
	}
	if c.String("role") == "" {
		return nil, usagef("tokens create needs --role: %s", roleNames)
	}
	role, ok := auth.ParseRole(c.String("role"))
	if !ok {
		return nil, usagef("--role %q: want %s", c.String("role"), roleNames)
	}
	customers := c.StringSlice("customer")
	for _, cu := range customers {
		if strings.TrimSpace(cu) == "" {
			return nil, usagef("--customer is blank: name a customer id, or '*' for any")
		}
	}
	scoped := role == rivorav1.Role_ROLE_PUBLISHER || role == rivorav1.Role_ROLE_CUSTOMER
	switch {
	case role == rivorav1.Role_ROLE_PUBLISHER && len(customers) == 0:
		return nil, usagef("a publisher token needs --customer ID (repeat for several, or --customer '*' for any customer)")
	case role == rivorav1.Role_ROLE_CUSTOMER && len(customers) == 0:
		return nil, usagef("a customer token needs --customer ID: the customer it acts for (repeat for several)")
	case role == rivorav1.Role_ROLE_CUSTOMER && slices.Contains(customers, "*"):
		return nil, usagef("--customer '*' is for publisher tokens: a customer token names its customers (--customer acme)")
	case !scoped && len(customers) > 0:
		return nil, usagef("--customer scopes publisher and customer tokens only: %s tokens act for every customer", auth.RoleName(role))
	}
	req := &rivorav1.CreateTokenRequest{Name: name, Role: role, Customers: customers}
	if c.IsSet("ttl") {
		ttl, err := parseTTL(c.String("ttl"))
		if err != nil {
			return nil, err
		}
		req.Ttl = durationpb.New(ttl)
	}
	return req, nil
}

// parseTTL reads a Go duration or whole days ("90d"), at least 1m. A
// token without --ttl lasts until revoked; --ttl 0 is refused rather than
// read as that, since it reads as "expire at once".
func parseTTL(v string) (time.Duration, error) {
	d, err := durations.Parse(v)
	if err != nil {
		return 0, usagef("--ttl %q: want a duration such as 720h, 30m or 90d, at most 100 years (omit --ttl for a token that does not expire)", v)
	}
	if d < 0 {
		return 0, usagef("--ttl %s is negative: want a positive duration such as 90d (omit --ttl for a token that does not expire)", v)
	}
	if d == 0 {
		return 0, usagef("--ttl %s: leave --ttl out for a token that lasts until revoked, or give a duration of at least 1m such as 90d", v)
	}
	if d < time.Minute {
		return 0, usagef("--ttl %s: at least 1m (a token that expires before it can be copied is of no use)", v)
	}
	return d, nil
}

func (e *env) createToken(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments (only flags)"); err != nil {
		return err
	}
	req, err := createTokenRequest(c)
	if err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.tokens().CreateToken(ctx, connect.NewRequest(req))
	if err != nil {
		return callFailed(fmt.Sprintf("create token %q", req.GetName()), err, nil)
	}
	info := resp.Msg.GetTokenInfo()
	if e.output == "json" {
		if err := writeCreatedTokenJSON(e.out, info, resp.Msg.GetToken()); err != nil {
			return err
		}
		return e.afterChange(c, resp.Msg.GetVersion())
	}
	err = fields(e.out,
		"ID", info.GetId(),
		"NAME", info.GetName(),
		"ROLE", auth.RoleName(info.GetRole()),
		"CUSTOMERS", dash(strings.Join(info.GetCustomers(), ", ")),
		"EXPIRES", expiryText(info.GetExpiresAt(), time.Now()),
		"TOKEN", resp.Msg.GetToken(),
	)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.out, "\nTOKEN is shown only this once: store it now (Rivora keeps only its hash).\nUse it with RIVORA_TOKEN, --token or --token-file; revoke it with `rivoractl tokens revoke %s`.\n", info.GetId()); err != nil {
		return err
	}
	return e.afterChange(c, resp.Msg.GetVersion())
}

// createdTokenJSON is the contract of `tokens create -o json`.
type createdTokenJSON struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	Role      string   `json:"role"`
	Customers []string `json:"customers"`
	ExpiresAt *string  `json:"expiresAt"`
	Token     string   `json:"token"`
}

func writeCreatedTokenJSON(w io.Writer, info *rivorav1.ApiToken, token string) error {
	return writeJSONValue(w, createdTokenJSON{
		ID: info.GetId(), Name: info.GetName(), Role: auth.RoleName(info.GetRole()),
		Customers: nonNilStrings(info.GetCustomers()), ExpiresAt: rfc3339(info.GetExpiresAt()), Token: token,
	})
}

func (e *env) tokensList() *ucli.Command {
	return &ucli.Command{
		Name:      "list",
		Aliases:   []string{"ls"},
		Usage:     "list API tokens: id, name, role, customers, expiry (never the tokens themselves)",
		UsageText: "rivoractl tokens list [-o json]",
		Description: `Lists every token Rivora accepts or has accepted until it expired. The
tokens themselves are never shown (Rivora keeps only their hashes).

-o json prints a JSON array of objects with id, name, role, customers,
createdAt, expiresAt (null when the token does not expire), expired and
createdBy (the name of the token that created it; "" for bootstrap).

Example:
   rivoractl tokens list -o json | jq -r '.[] | select(.role == "admin") | .id'`,
		Action: e.listTokens,
	}
}

func (e *env) listTokens(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments"); err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.tokens().ListTokens(ctx, connect.NewRequest(&rivorav1.ListTokensRequest{}))
	if err != nil {
		return callFailed("list tokens", err, nil)
	}
	tokens := resp.Msg.GetTokens()
	now := time.Now()
	if e.output == "json" {
		type tokenJSON struct {
			ID        string   `json:"id"`
			Name      string   `json:"name"`
			Role      string   `json:"role"`
			Customers []string `json:"customers"`
			CreatedAt *string  `json:"createdAt"`
			ExpiresAt *string  `json:"expiresAt"`
			Expired   bool     `json:"expired"`
			CreatedBy string   `json:"createdBy"`
		}
		out := make([]tokenJSON, 0, len(tokens))
		for _, t := range tokens {
			out = append(out, tokenJSON{
				ID: t.GetId(), Name: t.GetName(), Role: auth.RoleName(t.GetRole()), Customers: nonNilStrings(t.GetCustomers()),
				CreatedAt: rfc3339(t.GetCreatedAt()), ExpiresAt: rfc3339(t.GetExpiresAt()), Expired: expired(t.GetExpiresAt(), now),
				CreatedBy: t.GetCreatedBy(),
			})
		}
		return writeJSONValue(e.out, out)
	}
	if len(tokens) == 0 {
		_, err := fmt.Fprintln(e.out, "No tokens. Create one: rivoractl tokens create --name NAME --role ROLE")
		return err
	}
	tw := newTable(e.out)
	tw.row("ID\tNAME\tROLE\tCUSTOMERS\tCREATED\tEXPIRES\n")
	for _, t := range tokens {
		tw.row("%s\t%s\t%s\t%s\t%s\t%s\n", t.GetId(), oneLine(t.GetName()), auth.RoleName(t.GetRole()),
			dash(strings.Join(t.GetCustomers(), ",")), fmtTime(t.GetCreatedAt()), expiryText(t.GetExpiresAt(), now))
	}
	return tw.Flush()
}

func (e *env) tokensRevoke() *ucli.Command {
	return &ucli.Command{
		Name:      "revoke",
		Usage:     "revoke an API token: refused from now on, on every agent within a second",
		ArgsUsage: "ID",
		UsageText: "rivoractl tokens revoke ID [--wait] [-o json]",
		Description: `Revokes the token with id ID (tok_…, from ` + "`rivoractl tokens list`" + `): every
call made with it is refused from now on, by the control plane and, within a
second, by every agent. It cannot be undone: create a new token instead.
Revoking the token this command runs with is allowed; the next call fails.

-o json prints {"id", "name", "role", "version"}.

Example:
   rivoractl tokens revoke tok_0123456789abcdef`,
		Flags:  []ucli.Flag{waitFlag()},
		Action: e.revokeToken,
	}
}

func (e *env) revokeToken(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one token ID"); err != nil {
		return err
	}
	id := c.Args().First()
	if strings.HasPrefix(id, auth.TokenPrefix) {
		// Never send a secret where an id is expected (it would end up in
		// error messages and logs).
		return usagef("tokens revoke takes the token's id (tok_…), not the token itself: find it with `rivoractl tokens list`")
	}
	ctx, cancel := callContext(c)
	defer cancel()
	client := e.tokens()
	// Look the token up first, to say what was revoked: once revoked it
	// may no longer be listed.
	info, err := findToken(ctx, client, id)
	if err != nil {
		return err
	}
	resp, err := client.RevokeToken(ctx, connect.NewRequest(&rivorav1.RevokeTokenRequest{Id: id}))
	if err != nil {
		return callFailed(fmt.Sprintf("revoke token %q", id), err, map[connect.Code]string{
			connect.CodeNotFound: "list tokens with `rivoractl tokens list`",
		})
	}
	if e.output == "json" {
		out := struct {
			ID      string `json:"id"`
			Name    string `json:"name"`
			Role    string `json:"role"`
			Version uint64 `json:"version"`
		}{ID: id, Version: resp.Msg.GetVersion()}
		if info != nil {
			out.Name, out.Role = info.GetName(), auth.RoleName(info.GetRole())
		}
		if err := writeJSONValue(e.out, out); err != nil {
			return err
		}
		e.warnEdgesBehind(ctx, resp.Msg.GetVersion())
		return e.afterChange(c, resp.Msg.GetVersion())
	}
	what := "token " + id
	if info != nil {
		what = fmt.Sprintf("token %s (%s, %s)", id, oneLine(info.GetName()), auth.RoleName(info.GetRole()))
	}
	if _, err := fmt.Fprintf(e.out, "revoked %s: refused from now on, on every agent within a second\n", what); err != nil {
		return err
	}
	e.warnEdgesBehind(ctx, resp.Msg.GetVersion())
	return e.afterChange(c, resp.Msg.GetVersion())
}

// warnEdgesBehind warns, on stderr, of each edge that cannot have the
// revocation yet: its config watch is down, and it goes on accepting the
// token by the config it kept until it follows the control plane again.
func (e *env) warnEdgesBehind(ctx context.Context, version uint64) {
	resp, err := e.admin().ListEdges(ctx, connect.NewRequest(&rivorav1.ListEdgesRequest{}))
	if err != nil {
		say(e.errOut, "warning: could not check the edges (%v): an edge cut off from the control plane accepts the token until it reconnects\n", err)
		return
	}
	for _, edge := range resp.Msg.GetEdges() {
		if edge.GetWatching() || edge.GetBuffer().GetAppliedVersion() >= version {
			continue
		}
		say(e.errOut, "warning: edge %s does not follow the control plane now (last seen %s): it accepts this token until it reconnects; if the token leaked, stop the edge or its publishers\n",
			edge.GetName(), fmtTime(edge.GetLastSeen()))
	}
}

// findToken returns the token with id, or nil when it is not listed (the
// revoke then says whether it exists).
func findToken(ctx context.Context, client rivorav1connect.TokenServiceClient, id string) (*rivorav1.ApiToken, error) {
	resp, err := client.ListTokens(ctx, connect.NewRequest(&rivorav1.ListTokensRequest{}))
	if err != nil {
		return nil, callFailed(fmt.Sprintf("revoke token %q", id), err, nil)
	}
	i := slices.IndexFunc(resp.Msg.GetTokens(), func(t *rivorav1.ApiToken) bool { return t.GetId() == id })
	if i < 0 {
		return nil, nil
	}
	return resp.Msg.GetTokens()[i], nil
}

// expiryText is when a token expires: "never", the time, or the time and
// "(expired)" once it is past.
func expiryText(at *timestamppb.Timestamp, now time.Time) string {
	if at == nil {
		return "never"
	}
	if expired(at, now) {
		return fmtTime(at) + " (expired)"
	}
	return fmtTime(at)
}

func expired(at *timestamppb.Timestamp, now time.Time) bool {
	return at != nil && !at.AsTime().After(now)
}

// rfc3339 is a time for JSON output, nil (null) when unset.
func rfc3339(ts *timestamppb.Timestamp) *string {
	if ts == nil {
		return nil
	}
	s := ts.AsTime().UTC().Format(time.RFC3339Nano)
	return &s
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// writeJSONValue prints a plain Go value as indented JSON.
func writeJSONValue(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
