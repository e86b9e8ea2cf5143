package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

const orderSchema = `{"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}}`

func TestEventTypesCreateGetUpdateDeprecate(t *testing.T) {
	f, url := startFake(t)
	path := filepath.Join(t.TempDir(), "order.schema.json")
	if err := os.WriteFile(path, []byte(orderSchema), 0o600); err != nil {
		t.Fatal(err)
	}
	r := mustSucceed(t, run(t, url, "", "event-types", "create", "order.created", "--description", "An order was placed", "--schema", path))
	want := &rivorav1.CreateEventTypeRequest{Name: "order.created", Description: "An order was placed", Schema: orderSchema}
	if got := f.subs.last(); !proto.Equal(got, want) {
		t.Fatalf("CreateEventType request = %v, want %v", got, want)
	}
	for _, line := range []string{"NAME         order.created\n", "DESCRIPTION  An order was placed\n", "STATE        active\n", "SCHEMA       JSON Schema", "\n  \"required\": [\n"} {
		if !strings.Contains(r.stdout, line) {
			t.Fatalf("create output lacks %q:\n%s", line, r.stdout)
		}
	}
	// The schema from stdin; no schema.
	mustSucceed(t, run(t, url, orderSchema, "event-types", "create", "invoice.paid", "--schema", "-"))
	if got := f.subs.last().(*rivorav1.CreateEventTypeRequest); got.GetSchema() != orderSchema {
		t.Fatalf("--schema - sent %q", got.GetSchema())
	}
	r = mustSucceed(t, run(t, url, "", "event-types", "create", "order.test", "-o", "json"))
	var et rivorav1.EventType
	if err := protojson.Unmarshal([]byte(r.stdout), &et); err != nil || et.GetName() != "order.test" || et.GetSchema() != "" {
		t.Fatalf("create -o json (err %v):\n%s", err, r.stdout)
	}
	assertFailure(t, run(t, url, "", "event-types", "create", "order.test"), exitError, "rivoractl event-types update order.test")

	r = mustSucceed(t, run(t, url, "", "event-types", "get", "order.created", "-o", "json"))
	if err := protojson.Unmarshal([]byte(r.stdout), &et); err != nil || et.GetSchema() != orderSchema {
		t.Fatalf("get -o json (err %v):\n%s", err, r.stdout)
	}
	assertFailure(t, run(t, url, "", "event-types", "get", "nope"), exitError, "rivoractl event-types list --include-deprecated")

	mustSucceed(t, run(t, url, "", "event-types", "update", "order.created", "--remove-schema"))
	if got := f.subs.last(); !proto.Equal(got, &rivorav1.UpdateEventTypeRequest{Name: "order.created", Schema: ptr("")}) {
		t.Fatalf("update --remove-schema sent %v", got)
	}
	r = mustSucceed(t, run(t, url, "", "event-types", "update", "order.created", "--description", "v2", "--schema", path))
	if got := f.subs.last(); !proto.Equal(got, &rivorav1.UpdateEventTypeRequest{Name: "order.created", Description: ptr("v2"), Schema: ptr(orderSchema)}) {
		t.Fatalf("update sent %v", got)
	}
	if !strings.Contains(r.stdout, "DESCRIPTION  v2\n") {
		t.Fatalf("update output:\n%s", r.stdout)
	}

	r = mustSucceed(t, run(t, url, "", "event-types", "deprecate", "order.test"))
	if got := f.subs.last(); !proto.Equal(got, &rivorav1.DeprecateEventTypeRequest{Name: "order.test"}) || !strings.Contains(r.stdout, "STATE        deprecated\n") {
		t.Fatalf("deprecate sent %v, printed:\n%s", got, r.stdout)
	}
	mustSucceed(t, run(t, url, "", "event-types", "deprecate", "order.test", "--undo"))
	if got := f.subs.last(); !proto.Equal(got, &rivorav1.DeprecateEventTypeRequest{Name: "order.test", Undo: true}) {
		t.Fatalf("deprecate --undo sent %v", got)
	}
}

func TestEventTypesValidateLocally(t *testing.T) {
	f, url := startFake(t)
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "schema.yaml")
	if err := os.WriteFile(notJSON, []byte("type: object\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"event-types", "create"}, "takes one event type NAME"},
		{[]string{"event-types", "create", "a", "--schema", notJSON}, "is not JSON: want a JSON Schema"},
		{[]string{"event-types", "create", "a", "--schema", filepath.Join(dir, "missing.json")}, "--schema: open"},
		{[]string{"event-types", "update", "a"}, "nothing to update"},
		{[]string{"event-types", "update", "a", "--schema", notJSON, "--remove-schema"}, "--schema and --remove-schema: pass one"},
		{[]string{"event-types", "list", "x"}, "takes no arguments"},
		{[]string{"event-types", "deprecate"}, "takes one event type NAME"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			assertFailure(t, run(t, url, "", tt.args...), exitUsage, tt.want)
		})
	}
	if n := f.subs.count(); n != 0 {
		t.Fatalf("invalid command lines reached the server: %d requests", n)
	}
}

func TestEventTypesList(t *testing.T) {
	f, url := startFake(t)
	r := mustSucceed(t, run(t, url, "", "event-types", "list"))
	if !strings.Contains(r.stdout, "No event types yet; any type is accepted") || !strings.Contains(r.stdout, "rivoractl event-types create") {
		t.Fatalf("empty list: %q", r.stdout)
	}
	r = mustSucceed(t, run(t, url, "", "event-types", "list", "-o", "json"))
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("empty list -o json = %q", r.stdout)
	}
	mustSucceed(t, run(t, url, orderSchema, "event-types", "create", "order.created", "--schema", "-", "--description", "An order\nwas placed"))
	mustSucceed(t, run(t, url, "", "event-types", "create", "order.legacy"))
	mustSucceed(t, run(t, url, "", "event-types", "deprecate", "order.legacy"))
	f.subs.mu.Lock()
	f.subs.strict = true
	f.subs.mu.Unlock()

	r = mustSucceed(t, run(t, url, "", "event-types", "list"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "NAME SCHEMA STATE UPDATED DESCRIPTION" ||
		strings.Join(strings.Fields(lines[1]), " ") != "order.created yes active 2026-03-01T12:00:00.000Z An order was placed" ||
		lines[3] != "Publishing: types not in the catalogue are refused (--strict-event-types)." {
		t.Fatalf("list table:\n%s", r.stdout)
	}
	if got := f.subs.last(); !proto.Equal(got, &rivorav1.ListEventTypesRequest{}) {
		t.Fatalf("ListEventTypes request = %v", got)
	}
	r = mustSucceed(t, run(t, url, "", "event-types", "list", "--include-deprecated", "-o", "json"))
	var arr []json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &arr); err != nil || len(arr) != 2 {
		t.Fatalf("list -o json (err %v):\n%s", err, r.stdout)
	}
	var legacy rivorav1.EventType
	if err := protojson.Unmarshal(arr[1], &legacy); err != nil || legacy.GetName() != "order.legacy" || !legacy.GetDeprecated() {
		t.Fatalf("list -o json element (err %v): %s", err, arr[1])
	}
}
