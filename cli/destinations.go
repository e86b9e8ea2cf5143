package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rivora/rivora/internal/httpurl"
	"github.com/rivora/rivora/internal/limitbounds"
	"github.com/rivora/rivora/internal/rates"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk/webhook"
)

var notFoundHint = map[connect.Code]string{
	connect.CodeNotFound: "list destinations with `rivoractl destinations list`",
}

func (e *env) destinationsCommand() *ucli.Command {
	return &ucli.Command{
		Name:    "destinations",
		Aliases: []string{"destination", "dest"},
		Usage:   "create, inspect, change and delete destinations (where events are delivered)",
		Description: `A destination is a third-party URL Rivora POSTs events to, signed with its
secret (Standard Webhooks), within its limits (rate, burst, attempts, window,
timeout, in-flight cap). Unset limits use the server's defaults.

   rivoractl destinations create orders --url https://example.com/hooks --rate 50
   rivoractl destinations list
   rivoractl destinations get orders
   rivoractl destinations update orders --rate 10
   rivoractl destinations rotate-secret orders --grace 24h
   rivoractl destinations delete orders --force`,
		Action: parentAction,
		Subcommands: []*ucli.Command{
			e.destinationsCreate(),
			e.destinationsList(),
			e.destinationsGet(),
			e.destinationsUpdate(),
			e.destinationsRotateSecret(),
			e.destinationsDelete(),
			e.destinationsHealth(),
			e.destinationsPause(),
			e.destinationsResume(),
		},
	}
}

// limitFlags are the per-destination limits, shared by create and update;
// unset says what leaving one out means.
func limitFlags(unset, secretDefault string) []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "secret", Usage: "signing `SECRET` (whsec_ + base64 key of at least 16 bytes)", DefaultText: secretDefault},
		&ucli.Float64Flag{Name: "rate", Usage: "delivery `RATE` in events per second, 0.001 to 1e6 (token bucket refill)", DefaultText: unset},
		&ucli.IntFlag{Name: "burst", Usage: fmt.Sprintf("`N` deliveries allowed at once above the rate, 1 to %d", limitbounds.MaxBurst), DefaultText: unset},
		&ucli.IntFlag{Name: "max-attempts", Usage: fmt.Sprintf("stop retrying an event after `N` attempts, 1 to %d", limitbounds.MaxAttempts), DefaultText: unset},
		durationFlagOf("window", "stop retrying an event this `DURATION` after it was accepted (e.g. 72h)", 0, unset),
		durationFlagOf("timeout", "bound one delivery attempt to `DURATION` (e.g. 10s)", 0, unset),
		&ucli.IntFlag{Name: "max-in-flight", Usage: fmt.Sprintf("at most `N` concurrent attempts to this destination, 1 to %d", limitbounds.MaxInFlight), DefaultText: unset},
	}
}

func (e *env) destinationsCreate() *ucli.Command {
	return &ucli.Command{
		Name:      "create",
		Usage:     "register a destination and print it, with its signing secret",
		ArgsUsage: "ID",
		UsageText: "rivoractl destinations create ID --url URL [--owner-customer C] [--secret whsec_…] [--header 'Name: value']... [--rate R] [--burst B] [--max-attempts N] [--window 72h] [--timeout 10s] [--max-in-flight N] [--client-cert FILE --client-key FILE] [--server-ca FILE] [--oauth2-token-url URL --oauth2-client-id ID --oauth2-client-secret SECRET [--oauth2-scope S]... [--oauth2-audience A]]",
		Description: `Registers destination ID. Rivora signs every delivery with the destination's
secret; the receiver verifies the webhook-signature header with it (the Go SDK:
sdk.VerifyRequest(secret, r)). Omit --secret to have one generated. The
secret is printed here, once: store it with the receiver now. Every later
answer (get, list, update) carries only its fingerprint; to change it, use
` + "`destinations rotate-secret ID`" + ` (the old one keeps signing for a grace period).
--header adds a custom header to every attempt (a gateway's Authorization,
say); its value is kept like the secret: answers show only a fingerprint.

` + endpointAuthHelp + `

--owner-customer C makes it customer C's own endpoint: only C's
subscriptions may route to it (operators see and steer it like any other).
A customer token creates only such destinations, for its own customers, and
with the default limits, never on the origin (scheme, host and port) of a
destination the operators manage: it subscribes to that one instead.

Examples:
   rivoractl destinations create orders --url https://example.com/hooks --rate 50 --window 24h
   rivoractl destinations create billing --url https://gw.example.com/in --header 'Authorization: Bearer abc'
   rivoractl destinations create acme-hooks --url https://hooks.acme.example/rivora --owner-customer acme
   rivoractl destinations create bank --url https://bank.example/hooks --client-cert rivora.pem --client-key rivora.key --server-ca bank-ca.pem
   rivoractl destinations create erp --url https://erp.example/hooks --oauth2-token-url https://erp.example/oauth/token --oauth2-client-id rivora --oauth2-client-secret "$SECRET" --oauth2-scope webhooks
   rivoractl destinations create bank --url https://bank.example/in --signature-scheme v1a
   rivoractl destinations create legacy --url https://old.example/hook --legacy-signature-header X-Signature --legacy-signature-secret "$OLD_SECRET" --legacy-signature-encoding sha256=hex
` + signingHelp,
		Flags: append(append([]ucli.Flag{
			&ucli.StringFlag{Name: "url", Usage: "`URL` events are POSTed to (http or https); required"},
			&ucli.StringFlag{Name: "owner-customer", Usage: "make it customer `ID`'s own destination: only that customer's subscriptions may use it"},
			waitFlag(),
		}, limitFlags("server default", "generated")...), append(append(headerFlags(false), endpointAuthFlags(false)...), signingFlags(false)...)...),
		Action: e.createDestination,
	}
}

func (e *env) createDestination(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one destination ID"); err != nil {
		return err
	}
	id := c.Args().First()
	if !c.IsSet("url") {
		return usagef("--url is required: rivoractl destinations create %s --url https://example.com/hooks", id)
	}
	if err := checkURL(c.String("url")); err != nil {
		return err
	}
	req := &rivorav1.CreateDestinationRequest{Id: id, Url: c.String("url"), OwnerCustomer: c.String("owner-customer"), Limits: &rivorav1.Limits{}}
	if c.IsSet("owner-customer") && strings.TrimSpace(req.OwnerCustomer) == "" {
		return usagef("--owner-customer is blank: name the customer whose endpoint this is")
	}
	if c.IsSet("secret") {
		if err := checkSecret(c.String("secret"), "omit --secret to have one generated"); err != nil {
			return err
		}
		req.Secret = c.String("secret")
	}
	l := req.Limits
	var err error
	if req.SignatureScheme, err = schemeFlag(c); err != nil {
		return err
	}
	if req.SigningKey, err = signingKeyFlag(c); err != nil {
		return err
	}
	if req.LegacySignature, err = legacyFlags(c); err != nil {
		return err
	}
	if req.Headers, err = headersFlag(c); err != nil {
		return err
	}
	if l.RatePerSecond, err = rateFlag(c); err != nil {
		return err
	}
	if l.Burst, err = countFlag(c, "burst"); err != nil {
		return err
	}
	if l.MaxAttempts, err = countFlag(c, "max-attempts"); err != nil {
		return err
	}
	if l.Window, err = durationFlag(c, "window"); err != nil {
		return err
	}
	if l.Timeout, err = durationFlag(c, "timeout"); err != nil {
		return err
	}
	if l.MaxInFlight, err = countFlag(c, "max-in-flight"); err != nil {
		return err
	}
	if req.ClientCertificate, req.ServerCa, err = certificateFlags(c); err != nil {
		return err
	}
	if req.Oauth2, err = e.oauth2Flags(c, true); err != nil {
		return err
	}
	if proto.Equal(l, &rivorav1.Limits{}) {
		req.Limits = nil // none given: the defaults (all a customer token may ask for)
	}

	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.admin().CreateDestination(ctx, connect.NewRequest(req))
	if err != nil {
		// The server says whether the id is this caller's to update or
		// another customer's (then only that it is taken): no hint here.
		return callFailed(fmt.Sprintf("create destination %q", id), err, nil)
	}
	d := resp.Msg.GetDestination()
	if e.output == "json" {
		if err := writeJSON(e.out, d); err != nil {
			return err
		}
		return e.afterChange(c, resp.Msg.GetVersion())
	}
	if err := writeDestination(e.out, d, nil); err != nil {
		return err
	}
	if _, err = fmt.Fprintf(e.out, "\n%s\n", verifyHint(d)); err != nil {
		return err
	}
	return e.afterChange(c, resp.Msg.GetVersion())
}

func (e *env) destinationsList() *ucli.Command {
	return &ucli.Command{
		Name:      "list",
		Aliases:   []string{"ls"},
		Usage:     "list destinations and their effective limits",
		UsageText: "rivoractl destinations list [-o json]",
		Description: `Lists every destination. STATE is active, paused (by an operator, with the
reason given) or disabled (by Rivora: its partner answered 410 Gone; resume
it with ` + "`destinations resume ID`" + `). Signing secrets are never listed: they are
shown once, by ` + "`destinations create`" + `. JSON output also has paused, disabled
and pauseReason.

Example:
   rivoractl destinations list -o json | jq -r '.[].id'`,
		Action: e.listDestinations,
	}
}

func (e *env) listDestinations(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments"); err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.admin().ListDestinations(ctx, connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil {
		return callFailed("list destinations", err, nil)
	}
	ds := resp.Msg.GetDestinations()
	if e.output == "json" {
		return writeJSONArray(e.out, ds)
	}
	if len(ds) == 0 {
		_, err := fmt.Fprintln(e.out, "No destinations yet. Create one: rivoractl destinations create ID --url URL (with a customer token, add --owner-customer CUSTOMER)")
		return err
	}
	return writeDestinations(e.out, ds)
}

func (e *env) destinationsGet() *ucli.Command {
	return &ucli.Command{
		Name:      "get",
		Usage:     "show one destination, its limits and pending events",
		ArgsUsage: "ID",
		UsageText: "rivoractl destinations get ID [-o json]",
		Description: `Shows destination ID with its effective limits and how many events are
pending (accepted, not yet delivered or archived).

Example:
   rivoractl destinations get orders`,
		Action: e.getDestination,
	}
}

func (e *env) getDestination(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one destination ID"); err != nil {
		return err
	}
	id := c.Args().First()
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.admin().GetDestination(ctx, connect.NewRequest(&rivorav1.GetDestinationRequest{Id: id}))
	if err != nil {
		return callFailed(fmt.Sprintf("get destination %q", id), err, notFoundHint)
	}
	if e.output == "json" {
		return writeJSON(e.out, resp.Msg)
	}
	pending := resp.Msg.GetPending()
	return writeDestination(e.out, resp.Msg.GetDestination(), &pending)
}

func (e *env) destinationsUpdate() *ucli.Command {
	return &ucli.Command{
		Name:      "update",
		Usage:     "change a destination's URL, secret, headers, limits, client certificate or OAuth2 credentials",
		ArgsUsage: "ID",
		UsageText: "rivoractl destinations update ID [--url URL] [--secret whsec_…] [--header 'Name: value']... [--remove-header NAME]... [--rate R] [--burst B] [--max-attempts N] [--window 72h] [--timeout 10s] [--max-in-flight N] [--client-cert FILE --client-key FILE [--client-cert-overlap 24h]] [--client-cert-overlap D] [--server-ca FILE] [--oauth2-… flags] [--remove-client-cert] [--remove-server-ca] [--remove-oauth2]",
		Description: `Changes only what you pass; everything else stays as it is. Pending events
stay where they are and are delivered under the new settings. --secret
replaces the signing secret at once; ` + "`destinations rotate-secret ID`" + ` keeps the old
one signing for a grace period. --header sets a custom header (replacing
one of the same name), --remove-header drops one.

` + endpointAuthHelp + `

Examples:
   rivoractl destinations update orders --rate 5 --burst 5
   rivoractl destinations update orders --url https://new.example.com/hooks
   rivoractl destinations update orders --header 'X-Tenant: 42' --remove-header Authorization
   rivoractl destinations update bank --client-cert new.pem --client-key new.key --client-cert-overlap 48h
   rivoractl destinations update erp --oauth2-client-secret "$NEW_SECRET"
   rivoractl destinations update orders --signature-scheme both
` + signingHelp,
		Flags: append(append([]ucli.Flag{
			&ucli.StringFlag{Name: "url", Usage: "new `URL` events are POSTed to", DefaultText: "unchanged"},
			waitFlag(),
		}, limitFlags("unchanged", "unchanged")...), append(append(headerFlags(true), endpointAuthFlags(true)...), signingFlags(true)...)...),
		Action: e.updateDestination,
	}
}

func (e *env) updateDestination(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one destination ID"); err != nil {
		return err
	}
	id := c.Args().First()
	req := &rivorav1.UpdateDestinationRequest{Id: id}
	set := false
	if c.IsSet("url") {
		if err := checkURL(c.String("url")); err != nil {
			return err
		}
		req.Url, set = ptr(c.String("url")), true
	}
	if c.IsSet("secret") {
		if err := checkSecret(c.String("secret"), "use rotate-secret to have one generated"); err != nil {
			return err
		}
		req.Secret, set = ptr(c.String("secret")), true
	}
	headers, err := headersFlag(c)
	if err != nil {
		return err
	}
	req.SetHeaders, req.RemoveHeaders = headers, flagValues(c, "remove-header")
	set = set || len(req.SetHeaders) > 0 || len(req.RemoveHeaders) > 0
	if signingSet, err := updateSigningFlags(c, req); err != nil {
		return err
	} else if signingSet {
		set = true
	}
	if c.IsSet("rate") {
		r, err := rateFlag(c)
		if err != nil {
			return err
		}
		req.RatePerSecond, set = ptr(r), true
	}
	for _, f := range []struct {
		name string
		dst  **int32
	}{{"burst", &req.Burst}, {"max-attempts", &req.MaxAttempts}, {"max-in-flight", &req.MaxInFlight}} {
		if !c.IsSet(f.name) {
			continue
		}
		n, err := countFlag(c, f.name)
		if err != nil {
			return err
		}
		*f.dst, set = ptr(n), true
	}
	for _, f := range []struct {
		name string
		dst  **durationpb.Duration
	}{{"window", &req.Window}, {"timeout", &req.Timeout}} {
		if !c.IsSet(f.name) {
			continue
		}
		d, err := durationFlag(c, f.name)
		if err != nil {
			return err
		}
		*f.dst, set = d, true
	}
	authSet, err := e.updateEndpointAuthFlags(c, req)
	if err != nil {
		return err
	}
	if !set && !authSet {
		return usagef("nothing to update: pass at least one of --url, --secret, --header, --remove-header, --signature-scheme, --signing-key, --legacy-signature-*, --rate, --burst, --max-attempts, --window, --timeout, --max-in-flight, --client-cert/--client-key, --server-ca, --oauth2-*, --remove-client-cert, --remove-server-ca, --remove-oauth2")
	}

	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.admin().UpdateDestination(ctx, connect.NewRequest(req))
	if err != nil {
		return callFailed(fmt.Sprintf("update destination %q", id), err, notFoundHint)
	}
	if e.output == "json" {
		err = writeJSON(e.out, resp.Msg.GetDestination())
	} else {
		err = writeDestination(e.out, resp.Msg.GetDestination(), nil)
	}
	if err != nil {
		return err
	}
	return e.afterChange(c, resp.Msg.GetVersion())
}

func (e *env) destinationsDelete() *ucli.Command {
	return &ucli.Command{
		Name:      "delete",
		Aliases:   []string{"rm"},
		Usage:     "delete a destination",
		ArgsUsage: "ID",
		UsageText: "rivoractl destinations delete ID [--force]",
		Description: `Deletes destination ID. Refused while events are pending for it or
subscriptions route to it, unless --force: then its pending events are
archived as dead letters (reason "deleted") and its subscriptions are
deleted with it. The dead letters of events sent straight to the
destination can be replayed once it is created again; those routed by
one of its subscriptions cannot: replay and events resend refuse them
(the subscription's path, secret and headers went with it), and
` + "`rivoractl replay --skip-deleted-subscriptions`" + ` leaves them in the archive.
Before deleting, --force names the subscriptions it deletes.

Examples:
   rivoractl destinations delete orders
   rivoractl destinations delete orders --force`,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "force", Usage: "archive pending events as dead letters and delete anyway, with the destination's subscriptions (their dead letters cannot be replayed)"},
			waitFlag(),
		},
		Action: e.deleteDestination,
	}
}

// forceListTimeout bounds the listing of the subscriptions a forced
// delete takes with the destination (it warns of them; the delete goes on
// without the list).
const forceListTimeout = 5 * time.Second

func (e *env) deleteDestination(c *ucli.Context) (err error) {
	if err := exactArgs(c, 1, "one destination ID"); err != nil {
		return err
	}
	id := c.Args().First()
	ctx, cancel := callContext(c)
	defer cancel()
	var subs []string
	if c.Bool("force") {
		// Its own short bound: a listing that hangs must not take the
		// delete's time.
		listCtx, cancelList := context.WithTimeout(ctx, forceListTimeout)
		subs = e.warnSubscriptionsDeleted(listCtx, id)
		cancelList()
	}
	resp, err := e.admin().DeleteDestination(ctx, connect.NewRequest(&rivorav1.DeleteDestinationRequest{Id: id, Force: c.Bool("force")}))
	if err != nil {
		return callFailed(fmt.Sprintf("delete destination %q", id), err, map[connect.Code]string{
			connect.CodeNotFound:           notFoundHint[connect.CodeNotFound],
			connect.CodeFailedPrecondition: "pass --force to archive its pending events as dead letters and delete it with its subscriptions (the dead letters they routed cannot be replayed then)",
		})
	}
	if e.output == "json" {
		if err := writeJSONWith(e.out, resp.Msg, archiveCountsJSON); err != nil {
			return err
		}
		return e.afterChange(c, resp.Msg.GetVersion())
	}
	defer func() {
		if err == nil {
			err = e.afterChange(c, resp.Msg.GetVersion())
		}
	}()
	if len(subs) > 0 {
		err = say(e.out, "Deleted destination %s and its %s %s; %s. Those routed by the deleted subscriptions cannot be replayed nor resent (`rivoractl replay --skip-deleted-subscriptions` leaves them in the archive).\n",
			id, plural(len(subs), "subscription"), strings.Join(subs, ", "), archivedText(resp.Msg))
		return err
	}
	err = say(e.out, "Deleted destination %s; %s.\n", id, archivedText(resp.Msg))
	return err
}

// warnSubscriptionsDeleted says, on stderr, which subscriptions a forced
// delete of destination id deletes with it, before it does, and that the
// dead letters they routed cannot be replayed then (replay and resend
// refuse a deleted subscription's), and returns their ids. A list that
// fails is said and the delete goes on: --force was asked for.
func (e *env) warnSubscriptionsDeleted(ctx context.Context, id string) []string {
	resp, err := e.subscriptions().ListSubscriptions(ctx, connect.NewRequest(&rivorav1.ListSubscriptionsRequest{DestinationId: id}))
	if err != nil {
		_ = say(e.errOut, "warning: could not list the subscriptions of %s (%v); --force deletes them with it, and the dead letters they routed cannot be replayed\n", id, err)
		return nil
	}
	var ids []string
	for _, s := range resp.Msg.GetSubscriptions() {
		ids = append(ids, s.GetId())
	}
	if len(ids) > 0 {
		_ = say(e.errOut, "warning: --force deletes the %s of %s with it: %s. Their pending events become dead letters that `rivoractl replay` and `events resend` refuse (routed by a deleted subscription); `replay --skip-deleted-subscriptions` leaves them in the archive.\n",
			plural(len(ids), "subscription"), id, strings.Join(ids, ", "))
	}
	return ids
}

func ptr[T any](v T) *T { return &v }

func checkURL(raw string) error { return checkURLFlag("url", raw) }

// checkURLFlag checks the URL flag --name gave.
func checkURLFlag(name, raw string) error {
	if _, err := httpurl.Parse(raw); err != nil {
		return usagef("--%s %q: want an absolute http or https URL, e.g. https://example.com/hooks", name, raw)
	}
	return nil
}

// checkSecret checks a --secret flag; otherwise says what the command
// does without it (shown after the error, e.g. "omit --secret to have
// one generated").
func checkSecret(s, otherwise string) error {
	if _, err := webhook.Key(s); err != nil {
		return usagef("--secret: %v (or %s)", err, otherwise)
	}
	return nil
}

// rateFlag reads --rate; 0 (unset) when it is not given. A rate given
// must be in the server's bounds: an explicit 0 is refused, never read
// as "the default".
func rateFlag(c *ucli.Context) (float64, error) {
	if !c.IsSet("rate") {
		return 0, nil
	}
	r := c.Float64("rate")
	if !rates.Valid(r) {
		return 0, usagef("--rate %v: want %s", r, rates.Bound())
	}
	return r, nil
}

// countMax is the largest value of each whole-number limit flag: the
// server's bounds (internal/limitbounds), so that rivoractl states the
// range the server checks.
var countMax = map[string]int{
	"burst":         limitbounds.MaxBurst,
	"max-attempts":  limitbounds.MaxAttempts,
	"max-in-flight": limitbounds.MaxInFlight,
}

// countFlag reads a whole-number limit flag; 0 (unset) when it is not
// given. A value given must be from 1 to the flag's bound: an explicit 0
// is refused, never read as "the default".
func countFlag(c *ucli.Context, name string) (int32, error) {
	if !c.IsSet(name) {
		return 0, nil
	}
	n := c.Int(name)
	if most := countMax[name]; n < 1 || n > most {
		return 0, usagef("--%s %d: want a whole number from 1 to %d", name, n, most)
	}
	return int32(n), nil
}

// durationFlag returns the flag as a Duration message, nil when unset.
func durationFlag(c *ucli.Context, name string) (*durationpb.Duration, error) {
	if !c.IsSet(name) {
		return nil, nil
	}
	d := flagDuration(c, name)
	if d < 0 {
		return nil, usagef("--%s %s: want a positive duration such as 72h, 30m or 10s", name, d)
	}
	return durationpb.New(d), nil
}

func (e *env) destinationsPause() *ucli.Command {
	return &ucli.Command{
		Name:      "pause",
		Usage:     "stop every attempt to a destination; events keep being accepted",
		ArgsUsage: "ID",
		UsageText: "rivoractl destinations pause ID --reason TEXT [--wait]",
		Description: `Stops every delivery attempt to destination ID, scheduled retries included,
in every agent. New events are still accepted and wait in their lanes, and
the time spent paused does not count against their retry window. Nothing
pending moves. Resume with ` + "`rivoractl destinations resume ID`" + `.
--reason is required: the audit log and destinations get say it.

Example:
   rivoractl destinations pause orders --reason "partner maintenance" --wait`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "reason", Usage: "why, as `TEXT` (required; for the audit log and destinations get)"},
			waitFlag(),
		},
		Action: func(c *ucli.Context) error {
			if err := exactArgs(c, 1, "one destination ID"); err != nil {
				return err
			}
			id := c.Args().First()
			if strings.TrimSpace(c.String("reason")) == "" {
				return usagef("--reason is required: say why the destination's deliveries stop (it goes to the audit log and destinations get)")
			}
			ctx, cancel := callContext(c)
			defer cancel()
			resp, err := e.admin().PauseDestination(ctx, connect.NewRequest(&rivorav1.PauseDestinationRequest{DestinationId: id, Reason: c.String("reason")}))
			if err != nil {
				return callFailed(fmt.Sprintf("pause destination %q", id), err, notFoundHint)
			}
			if e.output == "json" {
				err = writeJSON(e.out, resp.Msg.GetDestination())
			} else {
				_, err = fmt.Fprintf(e.out, "Paused destination %s: no attempts until `rivoractl destinations resume %s`.\n", id, id)
			}
			if err != nil {
				return err
			}
			return e.afterChange(c, resp.Msg.GetVersion())
		},
	}
}

func (e *env) destinationsResume() *ucli.Command {
	return &ucli.Command{
		Name:      "resume",
		Usage:     "let a paused or disabled destination drain, oldest first per lane, through its budget",
		ArgsUsage: "ID",
		UsageText: "rivoractl destinations resume ID [--wait]",
		Description: `Resumes delivery to destination ID, paused by an operator or disabled by
Rivora after its partner answered 410 Gone (Standard Webhooks: the receiver
wants no more webhooks; fix that first, or the next 410 disables it again).
Its backlog drains in lane order, paced by its budget (no thundering herd);
nothing was dead-lettered while it was disabled.

A resume is also "try now": it ends a partner's Retry-After hold (HELD UNTIL
in destinations health; a Retry-After is held to an hour at most) and makes
due every lane held back by the partner's failures. On a destination that
is not paused but held by a Retry-After, resume ends the hold alone
(audited as destination.resume); one neither paused nor held is refused.

Examples:
   rivoractl destinations resume orders --wait`,
		Flags: []ucli.Flag{waitFlag()},
		Action: func(c *ucli.Context) error {
			if err := exactArgs(c, 1, "one destination ID"); err != nil {
				return err
			}
			id := c.Args().First()
			ctx, cancel := callContext(c)
			defer cancel()
			resp, err := e.admin().ResumeDestination(ctx, connect.NewRequest(&rivorav1.ResumeDestinationRequest{DestinationId: id}))
			if err != nil {
				return callFailed(fmt.Sprintf("resume destination %q", id), err, notFoundHint)
			}
			switch held := resp.Msg.GetEndedHoldUntil(); {
			case e.output == "json":
				err = writeJSON(e.out, resp.Msg.GetDestination())
			case held != nil:
				_, err = fmt.Fprintf(e.out, "Ended the Retry-After hold of destination %s (it held until %s): its lanes go now, paced by its budget.\n", id, fmtTime(held))
			default:
				_, err = fmt.Fprintf(e.out, "Resumed destination %s.\n", id)
			}
			if err != nil {
				return err
			}
			return e.afterChange(c, resp.Msg.GetVersion())
		},
	}
}
