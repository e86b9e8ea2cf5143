package cli

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Subscriptions: a customer's rule "my events of these types (and this
// filter) go to that destination". The server validates type patterns,
// compiles the CEL filter and checks that a path or URL stays on the
// destination's origin; rivoractl checks only what it can say better
// before sending (missing flags, --path with --url, a malformed secret).

var subscriptionNotFoundHint = map[connect.Code]string{
	connect.CodeNotFound: "list subscriptions with `rivoractl subscriptions list`",
}

func (e *env) subscriptionsCommand() *ucli.Command {
	return &ucli.Command{
		Name:    "subscriptions",
		Aliases: []string{"subscription", "subs", "sub"},
		Usage:   "route a customer's events by type (and filter) to destinations: create, list, change, pause, delete",
		Description: `A subscription says: customer C's events whose type matches TYPES (exact
names and globs such as order.*; '*' for all), and optionally a CEL filter,
go to destination D. An event published without --destination fans out: one
delivery per matching subscription, each with its own event id. A
subscription may deliver to its own path or URL on D's origin (D's budget
still protects that partner), sign with its own secret and add headers.

   rivoractl subscriptions create --customer acme --destination orders --types 'order.*,invoice.paid'
   rivoractl subscriptions create --customer acme --destination erp --types order.created \
       --filter 'data.amount > 100' --path /in/acme --generate-secret
   rivoractl subscriptions list --customer acme
   rivoractl subscriptions get sub_0123456789abcdef
   rivoractl subscriptions update sub_0123456789abcdef --types 'order.*'
   rivoractl subscriptions pause sub_0123456789abcdef --reason "customer maintenance"
   rivoractl subscriptions rotate-secret sub_0123456789abcdef --grace 24h
   rivoractl subscriptions delete sub_0123456789abcdef --force

The event types to subscribe to are in the catalogue: rivoractl event-types list.`,
		Action: parentAction,
		Subcommands: []*ucli.Command{
			e.subscriptionsCreate(),
			e.subscriptionsList(),
			e.subscriptionsGet(),
			e.subscriptionsUpdate(),
			e.subscriptionsPause(),
			e.subscriptionsResume(),
			e.subscriptionsRotateSecret(),
			e.subscriptionsDelete(),
		},
	}
}

// routeFlags are create's and update's --types, --filter, --path and
// --url; unset says what leaving one out means.
func routeFlags(unset string) []ucli.Flag {
	return []ucli.Flag{
		&ucli.GenericFlag{Name: "types", Value: &repeated{}, Usage: "event `TYPES` to route, comma-separated: exact names and globs where * is any run of characters ('order.*,invoice.paid'; '*' for all)", DefaultText: unset},
		&ucli.StringFlag{Name: "filter", Usage: "CEL `EXPR` over data, type, customer and lane that must be true, e.g. 'data.amount > 100 && type != \"order.test\"'; an event whose data lacks a field it reads does not match", DefaultText: unset},
		&ucli.StringFlag{Name: "path", Usage: "deliver to `PATH` (and query) on the destination's URL instead of its own path, e.g. /in/acme", DefaultText: unset},
		&ucli.StringFlag{Name: "url", Usage: "deliver to `URL` instead: same scheme, host and port as the destination's URL", DefaultText: unset},
		&ucli.StringFlag{Name: "description", Usage: "what the subscription is for, for people (`TEXT`)", DefaultText: unset},
	}
}

func (e *env) subscriptionsCreate() *ucli.Command {
	return &ucli.Command{
		Name:      "create",
		Usage:     "route a customer's events of some types to a destination",
		UsageText: "rivoractl subscriptions create --customer C --destination D --types 'order.*,invoice.paid' [--filter EXPR] [--path /in/c1 | --url URL] [--header 'Name: value']... [--secret whsec_… | --generate-secret] [--description TEXT] [--wait] [-o json]",
		Description: `Creates a subscription and prints it with its id (sub_…). From now on, events
of customer C published without --destination whose type matches --types
(and for which --filter is true) are delivered to destination D; events
published before are not.

Deliveries go to D's URL, or to --path on D's URL (replacing its path and
query), or to --url, a full URL on D's origin (same scheme, host and port),
so D's rate and budget still protect that partner. They are signed with D's
secret unless the subscription has its own: --secret whsec_… or
--generate-secret; that secret is printed here, once. --header adds a
custom header (a subscription's value wins over D's for the same name);
answers show only fingerprints of header values.

Examples:
   rivoractl subscriptions create --customer acme --destination orders --types 'order.*'
   rivoractl subscriptions create --customer acme --destination erp --types 'order.created,invoice.paid' \
       --filter 'data.amount > 100' --path /in/acme --generate-secret --header 'X-Tenant: acme'
   SUB=$(rivoractl subscriptions create --customer acme --destination orders --types '*' -o json | jq -r .id)`,
		Flags: append(append([]ucli.Flag{
			&ucli.StringFlag{Name: "customer", Aliases: []string{"c"}, Usage: "customer `ID` whose events are routed (required)"},
			&ucli.StringFlag{Name: "destination", Aliases: []string{"d"}, Usage: "destination `ID` they go to (required)"},
			&ucli.StringFlag{Name: "secret", Usage: "this subscription's own signing `SECRET` (whsec_ + base64 key of at least 16 bytes)", DefaultText: "the destination's"},
			&ucli.BoolFlag{Name: "generate-secret", Usage: "give the subscription its own generated signing secret, printed once"},
			waitFlag(),
		}, routeFlags("")...), headerFlags(false)...),
		Action: e.createSubscription,
	}
}

// createSubscriptionRequest checks the command line and builds the
// request, so a mistake is reported before anything reaches the server.
func createSubscriptionRequest(c *ucli.Context) (*rivorav1.CreateSubscriptionRequest, error) {
	var missing []string
	for _, name := range []string{"customer", "destination"} {
		if strings.TrimSpace(c.String(name)) == "" {
			missing = append(missing, "--"+name)
		}
	}
	types := typesFlag(c)
	if len(types) == 0 {
		missing = append(missing, "--types")
	}
	if len(missing) > 0 {
		return nil, usagef("subscriptions create needs %s, e.g. --customer acme --destination orders --types 'order.*,invoice.paid'", strings.Join(missing, ", "))
	}
	req := &rivorav1.CreateSubscriptionRequest{
		CustomerId:    c.String("customer"),
		DestinationId: c.String("destination"),
		Types:         types,
		Filter:        c.String("filter"),
		Description:   c.String("description"),
	}
	var err error
	if req.Path, req.Url, err = deliveryFlags(c); err != nil {
		return nil, err
	}
	if c.IsSet("secret") {
		if c.Bool("generate-secret") {
			return nil, usagef("--secret and --generate-secret: pass one (your secret, or one generated for you)")
		}
		if err := checkSecret(c.String("secret"), "omit --secret to sign with the destination's secret, or pass --generate-secret"); err != nil {
			return nil, err
		}
		req.Secret = c.String("secret")
	}
	req.GenerateSecret = c.Bool("generate-secret")
	if req.Headers, err = headersFlag(c); err != nil {
		return nil, err
	}
	return req, nil
}

// typesFlag is every --types value split at commas, blanks dropped
// (event types never contain a comma).
func typesFlag(c *ucli.Context) []string {
	var out []string
	for _, v := range flagValues(c, "types") {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

// deliveryFlags reads --path and --url, of which at most one may be
// given: where deliveries go on the destination's origin.
func deliveryFlags(c *ucli.Context) (path, url string, err error) {
	if c.IsSet("path") && c.IsSet("url") {
		return "", "", usagef("--path and --url: pass one (--path /in/c1 replaces the destination URL's path; --url names a full URL on the destination's origin)")
	}
	path, url = c.String("path"), c.String("url")
	if path != "" && !strings.HasPrefix(path, "/") {
		return "", "", usagef("--path %q: want a path starting with '/', e.g. /in/acme (or --url for a full URL)", path)
	}
	if url != "" {
		if err := checkURL(url); err != nil {
			return "", "", err
		}
	}
	return path, url, nil
}

func (e *env) createSubscription(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments (only flags)"); err != nil {
		return err
	}
	req, err := createSubscriptionRequest(c)
	if err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.subscriptions().CreateSubscription(ctx, connect.NewRequest(req))
	if err != nil {
		return callFailed(fmt.Sprintf("create a subscription of customer %q to destination %q", req.GetCustomerId(), req.GetDestinationId()), err, map[connect.Code]string{
			connect.CodeNotFound: "list destinations with `rivoractl destinations list`",
		})
	}
	s := resp.Msg.GetSubscription()
	if e.output == "json" {
		err = writeJSON(e.out, s)
	} else {
		err = e.writeCreatedSubscription(s)
	}
	if err != nil {
		return err
	}
	return e.afterChange(c, resp.Msg.GetVersion())
}

func (e *env) writeCreatedSubscription(s *rivorav1.Subscription) error {
	if err := writeSubscription(e.out, s, nil); err != nil {
		return err
	}
	var err error
	if s.GetSecret() != "" {
		_, err = fmt.Fprintf(e.out, "\nReceivers verify each delivery's webhook-signature with SECRET (Go: sdk.VerifyRequest), or, when the destination signs v1a, with its public key.\nSECRET is shown only this once: store it with the receiver now.\n")
	} else {
		err = say(e.out, "\nDeliveries are signed as destination %s signs them, with its secret or key (give this subscription its own: `rivoractl subscriptions rotate-secret %s`).\n", s.GetDestinationId(), s.GetId())
	}
	return err
}

func (e *env) subscriptionsList() *ucli.Command {
	return &ucli.Command{
		Name:      "list",
		Aliases:   []string{"ls"},
		Usage:     "list subscriptions, of one customer or to one destination",
		UsageText: "rivoractl subscriptions list [--customer C] [--destination D] [-o json]",
		Description: `Lists subscriptions: all of them, or a customer's, or those to a destination
(both flags: both conditions). A customer token lists only its customers'.
STATE is active or paused; DESTINATION STATE is the destination's health as
the customer may see it (healthy, degraded, down, paused, unknown). Secrets
are never listed.

Examples:
   rivoractl subscriptions list --customer acme
   rivoractl subscriptions list --destination orders -o json | jq -r '.[].id'`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "customer", Aliases: []string{"c"}, Usage: "only customer `ID`'s subscriptions"},
			&ucli.StringFlag{Name: "destination", Aliases: []string{"d"}, Usage: "only subscriptions to destination `ID`"},
		},
		Action: e.listSubscriptions,
	}
}

func (e *env) listSubscriptions(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments (filters are flags)"); err != nil {
		return err
	}
	req := &rivorav1.ListSubscriptionsRequest{CustomerId: c.String("customer"), DestinationId: c.String("destination")}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.subscriptions().ListSubscriptions(ctx, connect.NewRequest(req))
	if err != nil {
		return callFailed("list subscriptions", err, nil)
	}
	subs := resp.Msg.GetSubscriptions()
	if e.output == "json" {
		return writeJSONArray(e.out, subs)
	}
	if len(subs) == 0 {
		_, err := fmt.Fprintln(e.out, "No subscriptions"+listScope(req)+". Create one: rivoractl subscriptions create --customer C --destination D --types 'order.*'")
		return err
	}
	return writeSubscriptions(e.out, subs)
}

// listScope says which subscriptions a list asked for.
func listScope(req *rivorav1.ListSubscriptionsRequest) string {
	var parts []string
	if req.GetCustomerId() != "" {
		parts = append(parts, "of customer "+req.GetCustomerId())
	}
	if req.GetDestinationId() != "" {
		parts = append(parts, "to destination "+req.GetDestinationId())
	}
	if len(parts) == 0 {
		return " yet"
	}
	return " " + strings.Join(parts, " ")
}

func (e *env) subscriptionsGet() *ucli.Command {
	return &ucli.Command{
		Name:      "get",
		Usage:     "show one subscription: its types, filter, where it delivers, its state and pending events",
		ArgsUsage: "ID",
		UsageText: "rivoractl subscriptions get ID [-o json]",
		Description: `Shows subscription ID (sub_…): its customer, destination, types, filter,
the URL its deliveries go to, its secret's fingerprint (or that the
destination's secret signs), its headers (value fingerprints), whether it is
paused, the destination's health as its customer may see it, and how many of
its events are pending (accepted, not yet delivered or archived).

Example:
   rivoractl subscriptions get sub_0123456789abcdef -o json`,
		Action: e.getSubscription,
	}
}

func (e *env) getSubscription(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one subscription ID"); err != nil {
		return err
	}
	id := c.Args().First()
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.subscriptions().GetSubscription(ctx, connect.NewRequest(&rivorav1.GetSubscriptionRequest{Id: id}))
	if err != nil {
		return callFailed(fmt.Sprintf("get subscription %q", id), err, subscriptionNotFoundHint)
	}
	if e.output == "json" {
		return writeJSON(e.out, resp.Msg)
	}
	pending := resp.Msg.GetPending()
	return writeSubscription(e.out, resp.Msg.GetSubscription(), &pending)
}

func (e *env) subscriptionsUpdate() *ucli.Command {
	return &ucli.Command{
		Name:      "update",
		Usage:     "change a subscription's types, filter, path or URL, headers or description",
		ArgsUsage: "ID",
		UsageText: "rivoractl subscriptions update ID [--types 'order.*,…'] [--filter EXPR] [--path /in/c1 | --url URL] [--header 'Name: value']... [--remove-header NAME]... [--description TEXT] [--wait] [-o json]",
		Description: `Changes only what you pass; everything else stays as it is. --types replaces
the whole list. --filter '' removes the filter. --path or --url replaces
where deliveries go; --path '' (or --url '') sends them to the destination's
own URL again. --header sets a custom header (replacing one of the same
name), --remove-header drops one. Events already accepted keep their
routing; they are delivered with the subscription's settings at the time of
each attempt. To change the secret: ` + "`subscriptions rotate-secret ID`" + `.

Examples:
   rivoractl subscriptions update sub_0123456789abcdef --types 'order.*,invoice.*'
   rivoractl subscriptions update sub_0123456789abcdef --filter '' --path /in/acme-v2
   rivoractl subscriptions update sub_0123456789abcdef --header 'X-Tenant: 42' --remove-header Authorization`,
		Flags:  append(append([]ucli.Flag{waitFlag()}, routeFlags("unchanged")...), headerFlags(true)...),
		Action: e.updateSubscription,
	}
}

// updateSubscriptionRequest checks the command line and builds the
// request; it says which flags were given, so a no-op is refused.
func updateSubscriptionRequest(c *ucli.Context, id string) (*rivorav1.UpdateSubscriptionRequest, error) {
	req := &rivorav1.UpdateSubscriptionRequest{Id: id}
	set := false
	if c.IsSet("types") {
		req.Types = typesFlag(c)
		if len(req.Types) == 0 {
			return nil, usagef("--types is empty: name the event types to route, e.g. --types 'order.*,invoice.paid' ('*' for every type)")
		}
		req.SetTypes, set = true, true
	}
	if c.IsSet("filter") {
		req.Filter, set = ptr(c.String("filter")), true
	}
	path, url, err := deliveryFlags(c)
	if err != nil {
		return nil, err
	}
	switch {
	case (c.IsSet("path") && path == "") || (c.IsSet("url") && url == ""):
		// Both empty: the destination's own URL again.
		req.Path, req.Url, set = ptr(""), ptr(""), true
	case c.IsSet("path"):
		req.Path, set = ptr(path), true
	case c.IsSet("url"):
		req.Url, set = ptr(url), true
	}
	if c.IsSet("description") {
		req.Description, set = ptr(c.String("description")), true
	}
	if req.SetHeaders, err = headersFlag(c); err != nil {
		return nil, err
	}
	req.RemoveHeaders = flagValues(c, "remove-header")
	if !set && len(req.SetHeaders) == 0 && len(req.RemoveHeaders) == 0 {
		return nil, usagef("nothing to update: pass at least one of --types, --filter, --path, --url, --header, --remove-header, --description")
	}
	return req, nil
}

func (e *env) updateSubscription(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one subscription ID"); err != nil {
		return err
	}
	id := c.Args().First()
	req, err := updateSubscriptionRequest(c, id)
	if err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.subscriptions().UpdateSubscription(ctx, connect.NewRequest(req))
	if err != nil {
		return callFailed(fmt.Sprintf("update subscription %q", id), err, subscriptionNotFoundHint)
	}
	if e.output == "json" {
		err = writeJSON(e.out, resp.Msg.GetSubscription())
	} else {
		err = writeSubscription(e.out, resp.Msg.GetSubscription(), nil)
	}
	if err != nil {
		return err
	}
	return e.afterChange(c, resp.Msg.GetVersion())
}

func (e *env) subscriptionsDelete() *ucli.Command {
	return &ucli.Command{
		Name:      "delete",
		Aliases:   []string{"rm"},
		Usage:     "delete a subscription",
		ArgsUsage: "ID",
		UsageText: "rivoractl subscriptions delete ID [--force] [--wait] [-o json]",
		Description: `Deletes subscription ID: the customer's new events no longer go there. Refused
while events routed by it are pending, unless --force: then they are archived
as dead letters (reason "deleted"), which dlq list and dlq show keep. A replay
refuses them: the subscription's URL, secret and headers went with it. To
hold its events for later instead, pause it. Nothing is dropped silently.

Examples:
   rivoractl subscriptions delete sub_0123456789abcdef
   rivoractl subscriptions delete sub_0123456789abcdef --force`,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "force", Usage: "archive pending events as dead letters and delete anyway"},
			waitFlag(),
		},
		Action: e.deleteSubscription,
	}
}

func (e *env) deleteSubscription(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one subscription ID"); err != nil {
		return err
	}
	id := c.Args().First()
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.subscriptions().DeleteSubscription(ctx, connect.NewRequest(&rivorav1.DeleteSubscriptionRequest{Id: id, Force: c.Bool("force")}))
	if err != nil {
		return callFailed(fmt.Sprintf("delete subscription %q", id), err, map[connect.Code]string{
			connect.CodeNotFound:           subscriptionNotFoundHint[connect.CodeNotFound],
			connect.CodeFailedPrecondition: "pass --force to archive its pending events as dead letters and delete it",
		})
	}
	if e.output == "json" {
		err = writeJSONWith(e.out, resp.Msg, archiveCountsJSON)
	} else {
		_, err = fmt.Fprintf(e.out, "Deleted subscription %s; %s.\n", id, archivedText(resp.Msg))
	}
	if err != nil {
		return err
	}
	return e.afterChange(c, resp.Msg.GetVersion())
}

// archiveCounts is what a forced delete answers of the pending events it
// archived (DeleteDestinationResponse, DeleteSubscriptionResponse).
type archiveCounts interface {
	GetArchived() int64
	GetInFlight() int64
	GetArchivedLater() int64
}

// archiveCountsJSON are the counts a forced delete's answer shows with -o
// json even when 0 (protojson leaves a zero out): {"version": …} alone
// said nothing of what was archived, or left to attempts in flight.
var archiveCountsJSON = map[string]any{"archived": "0", "inFlight": "0", "archivedLater": "0"}

// archivedText says how many pending events a forced delete archived, and
// what it left to attempts in flight: their events, and the events
// queued behind them, archived once those attempts end.
func archivedText(c archiveCounts) string {
	var s string
	switch n := c.GetArchived(); {
	case n == 0 && c.GetInFlight() > 0:
		s = "no pending events were archived yet"
	case n == 0:
		s = "no pending events were archived"
	case n == 1:
		s = "archived 1 pending event as a dead letter (`rivoractl dlq list` shows it once written to the archive, within seconds)"
	default:
		s = fmt.Sprintf("archived %d pending events as dead letters (`rivoractl dlq list` shows them once written to the archive, within seconds)", n)
	}
	return s + inFlightText(c.GetInFlight(), c.GetArchivedLater())
}

// inFlightText says what a forced delete left to attempts in flight (""
// when none was).
func inFlightText(inFlight, later int64) string {
	if inFlight == 0 {
		return ""
	}
	s := "; 1 event was in flight: its attempt goes on (the event becomes a dead letter too if it fails)"
	behind, once := "it", "it ends"
	if inFlight > 1 {
		s = fmt.Sprintf("; %d events were in flight: their attempts go on (each event becomes a dead letter too if its attempt fails)", inFlight)
		behind, once = "them", "they end"
	}
	switch {
	case later == 1:
		s += fmt.Sprintf(", and the 1 event queued behind %s is archived as a dead letter once %s", behind, once)
	case later > 1:
		s += fmt.Sprintf(", and the %d events queued behind %s are archived as dead letters once %s", later, behind, once)
	}
	return s
}
