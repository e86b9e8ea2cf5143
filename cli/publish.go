package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/sdk"
)

// maxDataBytes bounds what --data reads; the server enforces its own,
// smaller, payload limit and says so.
const maxDataBytes = 64 << 20

func (e *env) publishCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "publish",
		Usage:     "publish one event: to a destination, or fanned out to the customer's subscriptions",
		UsageText: "rivoractl publish [--destination D | --subscription ID] --customer C --lane L --type T --data JSON|@file|@- [--content-type CT] [--idempotency-key K]",
		Description: `Publishes one event through the ingest API, exactly as an app using the SDK
would, once Rivora has stored it durably.

With --destination, the event goes to that destination and its event id is
printed. Without it, the event fans out: one delivery per active
subscription of the customer whose types (and filter) match --type, each
with its own event id, printed one line per route:
   SUBSCRIPTION  DESTINATION  EVENT_ID
or "0 subscriptions matched" (not an error: nothing was stored). With
--subscription ID, the event goes to that one subscription whatever its
types and filter: a test event. Events with the same destination, customer
and lane (and subscription) are delivered one at a time, in order.

--data takes the payload inline, @path to read a file, or @- to read stdin.
A JSON content type (the default) requires valid JSON. -o json prints the
PublishResponse (eventId, duplicate, routes, fannedOut).

Examples:
   rivoractl publish --destination orders --customer acme --lane user-42 \
       --type order.created --data '{"order": 1}'
   rivoractl publish --customer acme --lane user-42 --type order.created --data '{"amount": 120}'
   rivoractl publish --subscription sub_0123456789abcdef --customer acme --lane test \
       --type order.created --data '{"test": true}'
   cat event.json | rivoractl publish --destination orders --customer acme \
       --lane user-42 --type order.created --data @-
   rivoractl events get "$(rivoractl publish --destination orders ...)"`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "destination", Aliases: []string{"d"}, Usage: "destination `ID` to deliver to", DefaultText: "fan out to the customer's subscriptions"},
			&ucli.StringFlag{Name: "subscription", Aliases: []string{"s"}, Usage: "send a test event to subscription `ID` (of --customer) only, whether or not it matches"},
			&ucli.StringFlag{Name: "customer", Aliases: []string{"c"}, Usage: "customer `ID` the event belongs to"},
			&ucli.StringFlag{Name: "lane", Aliases: []string{"l"}, Usage: "lane `KEY` ordering the event, usually the end user's id"},
			&ucli.StringFlag{Name: "type", Aliases: []string{"t"}, Usage: "event `TYPE`, e.g. order.created"},
			&ucli.StringFlag{Name: "data", Usage: "payload: inline `JSON`, @path of a file, or @- for stdin"},
			&ucli.StringFlag{Name: "content-type", Usage: "payload `MEDIA_TYPE` (default application/json)"},
			&ucli.StringFlag{Name: "idempotency-key", Usage: "`KEY` naming the event: publishing it again stores nothing twice"},
		},
		Action: e.publish,
	}
}

func (e *env) publish(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments (only flags)"); err != nil {
		return err
	}
	if c.String("destination") != "" && c.String("subscription") != "" {
		return usagef("--destination and --subscription: pass one (or neither, to fan out to the customer's matching subscriptions)")
	}
	var missing []string
	for _, name := range []string{"customer", "lane", "type", "data"} {
		if c.String(name) == "" {
			missing = append(missing, "--"+name)
		}
	}
	if len(missing) > 0 {
		return usagef("publish needs %s: see `rivoractl publish --help`", strings.Join(missing, ", "))
	}
	payload, err := e.readData(c.String("data"))
	if err != nil {
		return err
	}
	ct := c.String("content-type")
	if isJSON(ct) && !json.Valid(payload) {
		return usagef("--data is not valid JSON; fix it or pass --content-type for another format")
	}

	client := sdk.New(e.server, sdk.WithHTTPClient(e.http), sdk.WithToken(e.token), sdk.WithRetry(3, 200*time.Millisecond))
	ctx, cancel := callContext(c)
	defer cancel()
	res, err := client.PublishResult(ctx, sdk.Event{
		Destination:    c.String("destination"),
		Subscription:   c.String("subscription"),
		Customer:       c.String("customer"),
		Lane:           c.String("lane"),
		Type:           c.String("type"),
		Payload:        payload,
		ContentType:    ct,
		IdempotencyKey: c.String("idempotency-key"),
	})
	if err != nil {
		hint := "list destinations with `rivoractl destinations list`"
		if c.String("destination") == "" {
			hint = "list the customer's subscriptions with `rivoractl subscriptions list --customer " + c.String("customer") + "`"
		}
		return callFailed("publish", err, map[connect.Code]string{connect.CodeNotFound: hint})
	}
	if e.output == "json" {
		return writeJSON(e.out, publishResponse(res))
	}
	if !res.FannedOut {
		if err := say(e.out, "%s\n", res.EventID); err != nil || !res.Duplicate {
			return err
		}
		_, err = fmt.Fprintln(e.errOut, "duplicate: this idempotency key had already been published; nothing new was stored")
		return err
	}
	return writeRoutes(e.out, e.errOut, res, c.String("customer"), c.String("type"))
}

// publishResponse is the SDK's result as the PublishResponse it came
// from, what -o json prints.
func publishResponse(r sdk.Result) *rivorav1.PublishResponse {
	resp := &rivorav1.PublishResponse{EventId: r.EventID, Duplicate: r.Duplicate, FannedOut: r.FannedOut}
	for _, rt := range r.Routes {
		resp.Routes = append(resp.Routes, &rivorav1.Route{SubscriptionId: rt.Subscription, DestinationId: rt.Destination, EventId: rt.EventID})
	}
	return resp
}

// writeRoutes prints a fan-out: one line per route (subscription,
// destination, event id), or that no subscription matched. That the
// publish was a duplicate goes to note (stderr), so stdout stays one line
// per route; a duplicate of a publish that matched nothing says so on its
// one line, since the subscriptions of now are not what it was matched
// against.
func writeRoutes(w, note io.Writer, r sdk.Result, customer, typ string) error {
	if len(r.Routes) == 0 && r.Duplicate {
		// A retry answers the first publish's routes (none), whatever
		// subscriptions exist now.
		_, err := fmt.Fprintf(w, "0 subscriptions matched: duplicate of an earlier publish with this idempotency key, which matched no subscription of customer %s then; nothing new was stored (a retry answers the first publish's routes, even if a subscription takes type %s now: publish with another --idempotency-key to fan out to the subscriptions there are now)\n", customer, typ)
		return err
	}
	if len(r.Routes) == 0 {
		_, err := fmt.Fprintf(w, "0 subscriptions matched: nothing was stored (no subscription of customer %s takes type %s with a filter that says yes to this event; see `rivoractl subscriptions list --customer %s`)\n", customer, typ, customer)
		return err
	}
	t := newTable(w)
	for _, rt := range r.Routes {
		t.row("%s\t%s\t%s\n", rt.Subscription, rt.Destination, rt.EventID)
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if r.Duplicate {
		_, err := fmt.Fprintln(note, "duplicate: this idempotency key had already been published; nothing new was stored")
		return err
	}
	return nil
}

// readData resolves --data: inline, @path or @- (stdin).
func (e *env) readData(v string) ([]byte, error) {
	path, isRef := strings.CutPrefix(v, "@")
	if !isRef {
		return []byte(v), nil
	}
	var r io.Reader
	switch path {
	case "":
		return nil, usagef("--data @ needs a file name, e.g. --data @event.json, or @- for stdin")
	case "-":
		r = e.in
	default:
		f, err := os.Open(path)
		if err != nil {
			return nil, usagef("--data %s: %v", v, err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxDataBytes+1))
	if err != nil {
		return nil, usagef("--data %s: %v", v, err)
	}
	if len(b) > maxDataBytes {
		return nil, usagef("--data %s: larger than %d MiB", v, maxDataBytes>>20)
	}
	return b, nil
}

// isJSON reports whether ct (empty meaning the default, application/json)
// is a JSON media type.
func isJSON(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}
