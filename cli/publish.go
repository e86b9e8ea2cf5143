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
		Usage:     "publish one event and print its id",
		UsageText: "rivoractl publish --destination D --customer C --lane L --type T --data JSON|@file|@- [--content-type CT] [--idempotency-key K]",
		Description: `Publishes one event through the ingest API, exactly as an app using the SDK
would, and prints its event id once Rivora has stored it durably. Events with
the same destination, customer and lane are delivered one at a time, in order.

--data takes the payload inline, @path to read a file, or @- to read stdin.
A JSON content type (the default) requires valid JSON.

Examples:
   rivoractl publish --destination orders --customer acme --lane user-42 \
       --type order.created --data '{"order": 1}'
   cat event.json | rivoractl publish --destination orders --customer acme \
       --lane user-42 --type order.created --data @-
   rivoractl events get "$(rivoractl publish ... )"`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "destination", Aliases: []string{"d"}, Usage: "destination `ID` to deliver to"},
			&ucli.StringFlag{Name: "customer", Aliases: []string{"c"}, Usage: "customer `ID` the event belongs to"},
			&ucli.StringFlag{Name: "lane", Aliases: []string{"l"}, Usage: "lane `KEY` ordering the event, usually the end user's id"},
			&ucli.StringFlag{Name: "type", Aliases: []string{"t"}, Usage: "event `TYPE`, e.g. order.created"},
			&ucli.StringFlag{Name: "data", Usage: "payload: inline `JSON`, @path of a file, or @- for stdin"},
			&ucli.StringFlag{Name: "content-type", Usage: "payload `MEDIA_TYPE` (default application/json)"},
			&ucli.StringFlag{Name: "idempotency-key", Usage: "`KEY` that becomes the event id; publishing it again stores nothing twice"},
		},
		Action: e.publish,
	}
}

func (e *env) publish(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments (only flags)"); err != nil {
		return err
	}
	var missing []string
	for _, name := range []string{"destination", "customer", "lane", "type", "data"} {
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
	id, err := client.Publish(ctx, sdk.Event{
		Destination:    c.String("destination"),
		Customer:       c.String("customer"),
		Lane:           c.String("lane"),
		Type:           c.String("type"),
		Payload:        payload,
		ContentType:    ct,
		IdempotencyKey: c.String("idempotency-key"),
	})
	if err != nil {
		return callFailed("publish", err, map[connect.Code]string{
			connect.CodeNotFound: "list destinations with `rivoractl destinations list`",
		})
	}
	if e.output == "json" {
		return writeJSON(e.out, &rivorav1.PublishResponse{EventId: id})
	}
	_, err = fmt.Fprintln(e.out, id)
	return err
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
