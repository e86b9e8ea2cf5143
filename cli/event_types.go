package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"connectrpc.com/connect"
	ucli "github.com/urfave/cli/v2"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// The event-type catalogue: what publishers send and what customers may
// subscribe to, each type with a description and an optional JSON Schema
// (draft 2020-12, or another draft it names with $schema) its data must
// satisfy. The server compiles the schema;
// rivoractl only checks that the file is JSON.

// maxSchemaBytes bounds what --schema reads; the server has its own bound.
const maxSchemaBytes = 1 << 20

var eventTypeNotFoundHint = map[connect.Code]string{
	connect.CodeNotFound: "list event types with `rivoractl event-types list --include-deprecated`",
}

func (e *env) eventTypesCommand() *ucli.Command {
	return &ucli.Command{
		Name:    "event-types",
		Aliases: []string{"event-type"},
		Usage:   "the catalogue of event types: descriptions, JSON Schemas, deprecation",
		Description: `The catalogue lists the event types publishers send and customers may
subscribe to. A type with a JSON Schema (draft 2020-12 unless its $schema names
2019-09, draft-07, draft-06 or draft-04) has the data of every
published event validated against it: a publish that does not satisfy it is
refused (invalid_argument naming the JSON path and the rule). With
` + "`rivora controlplane|dev --strict-event-types`" + `, types not in the catalogue
are refused too. Everyone reads the catalogue; admins change it.

   rivoractl event-types create order.created --description "An order was placed" --schema order.schema.json
   rivoractl event-types list
   rivoractl event-types get order.created
   rivoractl event-types update order.created --schema order-v2.schema.json
   rivoractl event-types deprecate order.legacy`,
		Action: parentAction,
		Subcommands: []*ucli.Command{
			e.eventTypesCreate(),
			e.eventTypesList(),
			e.eventTypesGet(),
			e.eventTypesUpdate(),
			e.eventTypesDeprecate(),
		},
	}
}

func (e *env) eventTypesCreate() *ucli.Command {
	return &ucli.Command{
		Name:      "create",
		Usage:     "add an event type to the catalogue",
		ArgsUsage: "NAME",
		UsageText: "rivoractl event-types create NAME [--description TEXT] [--schema FILE] [--wait] [-o json]",
		Description: `Adds event type NAME (1–128 letters, digits and "._-:", e.g. order.created)
to the catalogue. --schema FILE (or - for stdin) is a JSON Schema, draft
2020-12 unless its $schema names 2019-09, draft-07, draft-06 or draft-04 (each
validated by its own draft's rules; any other $schema is refused), without
external $refs or reference cycles: from now on every published event of this
type must have data satisfying it.

Examples:
   rivoractl event-types create order.created --description "An order was placed"
   rivoractl event-types create invoice.paid --schema invoice.schema.json`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "description", Usage: "what the event means, for publishers and subscribers (`TEXT`)"},
			&ucli.StringFlag{Name: "schema", Usage: "JSON Schema `FILE` the data must satisfy (draft 2020-12, or the draft its $schema names: 2019-09, 07, 06, 04); - reads stdin"},
			waitFlag(),
		},
		Action: e.createEventType,
	}
}

func (e *env) createEventType(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one event type NAME"); err != nil {
		return err
	}
	name := c.Args().First()
	req := &rivorav1.CreateEventTypeRequest{Name: name, Description: c.String("description")}
	if c.IsSet("schema") {
		schema, err := e.readSchema(c.String("schema"))
		if err != nil {
			return err
		}
		req.Schema = schema
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.eventTypes().CreateEventType(ctx, connect.NewRequest(req))
	if err != nil {
		return callFailed(fmt.Sprintf("create event type %q", name), err, map[connect.Code]string{
			connect.CodeAlreadyExists: "change it with `rivoractl event-types update " + name + "`",
		})
	}
	return e.printEventType(c, resp.Msg.GetEventType(), resp.Msg.GetVersion())
}

// printEventType prints a created or changed event type and honours
// --wait.
func (e *env) printEventType(c *ucli.Context, t *rivorav1.EventType, version uint64) error {
	var err error
	if e.output == "json" {
		err = writeJSON(e.out, t)
	} else {
		err = writeEventType(e.out, t)
	}
	if err != nil {
		return err
	}
	return e.afterChange(c, version)
}

// readSchema reads --schema: a file, or stdin for "-". It must be JSON;
// whether it is a valid schema is the server's to say.
func (e *env) readSchema(path string) (string, error) {
	var r io.Reader
	switch path {
	case "":
		return "", usagef("--schema needs a file name, e.g. --schema order.schema.json (- for stdin)")
	case "-":
		r = e.in
	default:
		f, err := os.Open(path)
		if err != nil {
			return "", usagef("--schema: %v", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxSchemaBytes+1))
	if err != nil {
		return "", usagef("--schema %s: %v", path, err)
	}
	if len(b) > maxSchemaBytes {
		return "", usagef("--schema %s: larger than %d MiB", path, maxSchemaBytes>>20)
	}
	if !json.Valid(b) {
		return "", usagef("--schema %s is not JSON: want a JSON Schema document", path)
	}
	return string(b), nil
}

func (e *env) eventTypesList() *ucli.Command {
	return &ucli.Command{
		Name:      "list",
		Aliases:   []string{"ls"},
		Usage:     "list the catalogue's event types",
		UsageText: "rivoractl event-types list [--include-deprecated] [-o json]",
		Description: `Lists the catalogue: each type's name, whether it has a schema, and its
description. Deprecated types (still accepted and routed, no longer offered
for new subscriptions) are listed only with --include-deprecated. The table
also says whether the cell refuses types not in the catalogue
(--strict-event-types). -o json prints a JSON array of event types (name,
description, schema, deprecated, createdAt, updatedAt).

Example:
   rivoractl event-types list --include-deprecated -o json | jq -r '.[].name'`,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "include-deprecated", Usage: "list deprecated types too"},
		},
		Action: e.listEventTypes,
	}
}

func (e *env) listEventTypes(c *ucli.Context) error {
	if err := exactArgs(c, 0, "no arguments"); err != nil {
		return err
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.eventTypes().ListEventTypes(ctx, connect.NewRequest(&rivorav1.ListEventTypesRequest{IncludeDeprecated: c.Bool("include-deprecated")}))
	if err != nil {
		return callFailed("list event types", err, nil)
	}
	types := resp.Msg.GetEventTypes()
	if e.output == "json" {
		return writeJSONArray(e.out, types)
	}
	strict := "any type is accepted (the catalogue is not enforced; --strict-event-types enforces it)"
	if resp.Msg.GetStrict() {
		strict = "types not in the catalogue are refused (--strict-event-types)"
	}
	if len(types) == 0 {
		_, err := fmt.Fprintf(e.out, "No event types yet; %s.\nAdd one: rivoractl event-types create order.created --description TEXT\n", strict)
		return err
	}
	t := newTable(e.out)
	t.row("NAME\tSCHEMA\tSTATE\tUPDATED\tDESCRIPTION\n")
	for _, et := range types {
		t.row("%s\t%s\t%s\t%s\t%s\n", et.GetName(), yesNo(et.GetSchema() != ""), eventTypeState(et), fmtTime(et.GetUpdatedAt()), dash(oneLine(et.GetDescription())))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.out, "\nPublishing: %s.\n", strict)
	return err
}

func (e *env) eventTypesGet() *ucli.Command {
	return &ucli.Command{
		Name:      "get",
		Usage:     "show an event type, with its schema",
		ArgsUsage: "NAME",
		UsageText: "rivoractl event-types get NAME [-o json]",
		Description: `Shows event type NAME: its description, whether it is deprecated, and its
JSON Schema, indented.

Example:
   rivoractl event-types get order.created -o json | jq -r .schema`,
		Action: e.getEventType,
	}
}

func (e *env) getEventType(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one event type NAME"); err != nil {
		return err
	}
	name := c.Args().First()
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.eventTypes().GetEventType(ctx, connect.NewRequest(&rivorav1.GetEventTypeRequest{Name: name}))
	if err != nil {
		return callFailed(fmt.Sprintf("get event type %q", name), err, eventTypeNotFoundHint)
	}
	if e.output == "json" {
		return writeJSON(e.out, resp.Msg.GetEventType())
	}
	return writeEventType(e.out, resp.Msg.GetEventType())
}

func (e *env) eventTypesUpdate() *ucli.Command {
	return &ucli.Command{
		Name:      "update",
		Usage:     "change an event type's description or schema",
		ArgsUsage: "NAME",
		UsageText: "rivoractl event-types update NAME [--description TEXT] [--schema FILE | --remove-schema] [--wait] [-o json]",
		Description: `Changes only what you pass. --schema replaces the schema: events published
from now on are validated against the new one (events already accepted are
not checked again); --remove-schema stops validating.

Examples:
   rivoractl event-types update order.created --schema order-v2.schema.json
   rivoractl event-types update order.created --description "An order was placed (v2)" --remove-schema`,
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "description", Usage: "new description (`TEXT`)", DefaultText: "unchanged"},
			&ucli.StringFlag{Name: "schema", Usage: "new JSON Schema `FILE` (draft 2020-12, or the draft its $schema names: 2019-09, 07, 06, 04); - reads stdin", DefaultText: "unchanged"},
			&ucli.BoolFlag{Name: "remove-schema", Usage: "remove the schema: data is no longer validated"},
			waitFlag(),
		},
		Action: e.updateEventType,
	}
}

func (e *env) updateEventType(c *ucli.Context) error {
	if err := exactArgs(c, 1, "one event type NAME"); err != nil {
		return err
	}
	name := c.Args().First()
	req := &rivorav1.UpdateEventTypeRequest{Name: name}
	if c.IsSet("description") {
		req.Description = ptr(c.String("description"))
	}
	switch {
	case c.IsSet("schema") && c.Bool("remove-schema"):
		return usagef("--schema and --remove-schema: pass one (a new schema, or none)")
	case c.IsSet("schema"):
		schema, err := e.readSchema(c.String("schema"))
		if err != nil {
			return err
		}
		req.Schema = ptr(schema)
	case c.Bool("remove-schema"):
		req.Schema = ptr("")
	}
	if req.Description == nil && req.Schema == nil {
		return usagef("nothing to update: pass --description, --schema or --remove-schema")
	}
	ctx, cancel := callContext(c)
	defer cancel()
	resp, err := e.eventTypes().UpdateEventType(ctx, connect.NewRequest(req))
	if err != nil {
		return callFailed(fmt.Sprintf("update event type %q", name), err, eventTypeNotFoundHint)
	}
	return e.printEventType(c, resp.Msg.GetEventType(), resp.Msg.GetVersion())
}

func (e *env) eventTypesDeprecate() *ucli.Command {
	return &ucli.Command{
		Name:      "deprecate",
		Usage:     "stop offering an event type for new subscriptions (it is still accepted and routed)",
		ArgsUsage: "NAME",
		UsageText: "rivoractl event-types deprecate NAME [--undo] [--wait] [-o json]",
		Description: `Marks event type NAME deprecated: publishers may still send it and existing
subscriptions still receive it (and keep it through other edits), but it is
no longer offered for new subscriptions: naming it in a new subscription,
or adding it to one, is refused (a glob such as order.* still takes it; the
portal hides it; event-types list shows it only with --include-deprecated).
--undo clears the mark.

Examples:
   rivoractl event-types deprecate order.legacy
   rivoractl event-types deprecate order.legacy --undo`,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "undo", Usage: "clear the deprecation"},
			waitFlag(),
		},
		Action: func(c *ucli.Context) error {
			if err := exactArgs(c, 1, "one event type NAME"); err != nil {
				return err
			}
			name := c.Args().First()
			ctx, cancel := callContext(c)
			defer cancel()
			resp, err := e.eventTypes().DeprecateEventType(ctx, connect.NewRequest(&rivorav1.DeprecateEventTypeRequest{Name: name, Undo: c.Bool("undo")}))
			if err != nil {
				return callFailed(fmt.Sprintf("deprecate event type %q", name), err, eventTypeNotFoundHint)
			}
			return e.printEventType(c, resp.Msg.GetEventType(), resp.Msg.GetVersion())
		},
	}
}

// writeEventType prints one event type as aligned fields, then its schema
// indented.
func writeEventType(w io.Writer, t *rivorav1.EventType) error {
	err := fields(w,
		"NAME", t.GetName(),
		"DESCRIPTION", dash(t.GetDescription()),
		"STATE", eventTypeState(t),
		"SCHEMA", schemaSummary(t.GetSchema()),
		"CREATED", fmtTime(t.GetCreatedAt()),
		"UPDATED", fmtTime(t.GetUpdatedAt()),
	)
	if err != nil || t.GetSchema() == "" {
		return err
	}
	var out bytes.Buffer
	if json.Indent(&out, []byte(t.GetSchema()), "", "  ") != nil {
		out.Reset()
		out.WriteString(t.GetSchema())
	}
	_, err = fmt.Fprintf(w, "\n%s\n", visibleText(string(bytes.TrimSpace(out.Bytes()))))
	return err
}

func schemaSummary(schema string) string {
	if schema == "" {
		return "- (data is not validated)"
	}
	return "JSON Schema (below): published data must satisfy it"
}

func eventTypeState(t *rivorav1.EventType) string {
	if t.GetDeprecated() {
		return "deprecated"
	}
	return "active"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
