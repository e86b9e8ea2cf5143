package routing

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// MaxSchemaLen bounds a schema's text.
const MaxSchemaLen = 64 << 10

// Schema is a compiled JSON Schema (draft 2020-12 unless it names another
// with $schema: Drafts) for an event type's data.
type Schema struct {
	schema *jsonschema.Schema
}

// noLoader refuses every external reference: a schema must be self-contained
// (a $ref to a URL would make the control plane or an agent fetch it).
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external reference %s: schemas must be self-contained ($ref within the document only)", url)
}

// Drafts names the JSON Schema drafts a schema may declare with $schema,
// for messages and help: those the validator (santhosh-tekuri/jsonschema
// v6) implements, each with its own rules (draft-04's boolean
// exclusiveMaximum, 2019-09's $recursiveRef); a schema that declares none
// is draft 2020-12.
const Drafts = "2020-12 (the default), 2019-09, draft-07, draft-06 and draft-04"

// drafts are the $schema values the validator honours, without scheme
// and with no fragment but an empty one, by draft name.
var drafts = map[string]string{
	"json-schema.org/schema":               "draft 2020-12", // the latest
	"json-schema.org/draft/2020-12/schema": "draft 2020-12",
	"json-schema.org/draft/2019-09/schema": "draft 2019-09",
	"json-schema.org/draft-07/schema":      "draft-07",
	"json-schema.org/draft-06/schema":      "draft-06",
	"json-schema.org/draft-04/schema":      "draft-04",
}

// schemaDraft is the draft the document declares at its root ("draft
// 2020-12" when it declares none). Any other $schema is refused here, by name:
// the validator would take it for a metaschema to fetch, and the loader
// refuses that as an external reference, which says nothing of drafts.
func schemaDraft(doc any) (string, error) {
	obj, ok := doc.(map[string]any)
	if !ok {
		return "draft 2020-12", nil
	}
	v, ok := obj["$schema"]
	if !ok {
		return "draft 2020-12", nil
	}
	url, ok := v.(string)
	if ok {
		u := strings.TrimSuffix(url, "#")
		if rest, cut := strings.CutPrefix(u, "http://"); cut {
			u = rest
		} else {
			u = strings.TrimPrefix(u, "https://")
		}
		if d, known := drafts[u]; known {
			return d, nil
		}
	}
	return "", fmt.Errorf("schema's $schema %s is not a JSON Schema draft this validator supports: declare one of %s by its json-schema.org URL (such as https://json-schema.org/draft/2020-12/schema or http://json-schema.org/draft-07/schema#), or leave $schema out for 2020-12", quoteJSON(v), Drafts)
}

// quoteJSON writes a JSON value for a message: a string quoted, anything
// else as Go prints it.
func quoteJSON(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%v", v)
}

// schemaURL is the name CompileSchema gives the document (never shown).
const schemaURL = "rivora:///schema.json"

// CompileSchema compiles a JSON Schema document. A schema that may enter
// the catalogue passes CheckSchema too.
func CompileSchema(source string) (*Schema, error) {
	if len(source) > MaxSchemaLen {
		return nil, fmt.Errorf("schema is %d bytes; the limit is %d", len(source), MaxSchemaLen)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(source))
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	draft, err := schemaDraft(doc)
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, compileError(err, draft)
	}
	return &Schema{schema: s}, nil
}

// CheckSchema is what a schema must pass to enter the catalogue: it
// compiles (CompileSchema), and it holds no reference cycle — a "$ref"
// (or allOf, anyOf, oneOf, not, if/then/else, dependentSchemas) that
// leads back to where it started without moving into the data, such as
// {"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}. The validator
// refuses every value that reaches such a cycle, so a type with that
// schema would refuse every event of the type. The agents compile with
// CompileSchema alone, so that a schema stored before this check still
// loads with the rest of the catalogue.
func CheckSchema(source string) error {
	s, err := CompileSchema(source)
	if err != nil {
		return err
	}
	if cycle := refCycle(s.schema); cycle != nil {
		return fmt.Errorf("schema has a reference cycle: %s leads back to itself without moving into the data, so validating an event would never end and every event of the type would be refused; make one step of the cycle apply to a property or an item (properties, items), or remove it", strings.Join(cycle, " → "))
	}
	return nil
}

// refCycle is a cycle among the in-place subschemas (those that apply
// to the value their parent applies to, not to one of its properties or
// items) of any schema in root, as the schema locations along it, the
// first repeated last; nil when there is none. It is found in the
// compiled schema, whatever value is validated: the validator finds a
// cycle only when a value reaches it (and one under "not" may even let
// the value pass).
func refCycle(root *jsonschema.Schema) []string {
	const (
		visiting = 1
		done     = 2
	)
	state := map[*jsonschema.Schema]int{}
	var path []*jsonschema.Schema
	var cycle []string
	var visit func(s *jsonschema.Schema) bool
	visit = func(s *jsonschema.Schema) bool {
		switch state[s] {
		case visiting:
			for _, p := range append(path[slices.Index(path, s):], s) {
				cycle = append(cycle, location(p))
			}
			return true
		case done:
			return false
		}
		state[s] = visiting
		path = append(path, s)
		for _, next := range inPlace(s) {
			if visit(next) {
				return true
			}
		}
		path = path[:len(path)-1]
		state[s] = done
		return false
	}
	for _, s := range reachable(root) {
		if visit(s) {
			return cycle
		}
	}
	return nil
}

// reachable is every schema root leads to, root first.
func reachable(root *jsonschema.Schema) []*jsonschema.Schema {
	seen := map[*jsonschema.Schema]bool{root: true}
	out := []*jsonschema.Schema{root}
	for i := 0; i < len(out); i++ {
		for _, next := range slices.Concat(inPlace(out[i]), onParts(out[i])) {
			if !seen[next] {
				seen[next] = true
				out = append(out, next)
			}
		}
	}
	return out
}

// onParts are the subschemas of s that apply to parts of its value (its
// properties, items, property names, decoded content).
func onParts(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.PropertyNames, s.UnevaluatedProperties, s.Contains, s.Items2020, s.UnevaluatedItems, s.ContentSchema}
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		out = append(out, s.Properties[k])
	}
	for _, v := range s.PatternProperties {
		out = append(out, v)
	}
	out = append(slices.Concat(out, s.PrefixItems), asSchemas(s.AdditionalProperties)...)
	out = append(append(out, asSchemas(s.Items)...), asSchemas(s.AdditionalItems)...)
	return slices.DeleteFunc(out, func(x *jsonschema.Schema) bool { return x == nil })
}

// asSchemas is a keyword value that may hold schemas (a schema, a list
// of them, or a boolean) as its schemas.
func asSchemas(v any) []*jsonschema.Schema {
	switch v := v.(type) {
	case *jsonschema.Schema:
		return []*jsonschema.Schema{v}
	case []*jsonschema.Schema:
		return v
	}
	return nil
}

// inPlace are the subschemas of s that apply to the same value as s.
// A dynamic reference is taken to its static target.
func inPlace(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else}
	if s.DynamicRef != nil {
		out = append(out, s.DynamicRef.Ref)
	}
	out = slices.Concat(out, s.AllOf, s.AnyOf, s.OneOf)
	for _, k := range slices.Sorted(maps.Keys(s.DependentSchemas)) {
		out = append(out, s.DependentSchemas[k])
	}
	for _, k := range slices.Sorted(maps.Keys(s.Dependencies)) {
		if d, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
			out = append(out, d)
		}
	}
	return slices.DeleteFunc(out, func(x *jsonschema.Schema) bool { return x == nil })
}

// location is where s is in the schema document, as a JSON pointer
// fragment ("#/$defs/a"), without the internal URL CompileSchema gives
// the document.
func location(s *jsonschema.Schema) string {
	loc := strings.TrimPrefix(s.Location, schemaURL)
	if loc == "" || loc == "#" {
		return "# (the root)"
	}
	return loc
}

// compileError says why a schema of draft does not compile. One that
// breaks the JSON Schema metaschema names where, in the schema, and what
// is wrong ("schema at /properties/amount/minimum: got string, want
// number"), not the library's internal document URL.
func compileError(err error, draft string) error {
	var sve *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if !errors.As(err, &sve) || !errors.As(sve.Err, &ve) {
		return fmt.Errorf("schema does not compile: %w", err)
	}
	leaf := deepest(ve)
	at := "/" + strings.Join(leaf.InstanceLocation, "/")
	return fmt.Errorf("schema at %s is not a valid JSON Schema (%s): %s", at, draft, leafMessage(leaf))
}

// Validate checks an event's JSON payload against the schema. The error
// names the JSON path of the first failing value and the rule it broke:
// "data/amount: minimum: got -1, want 0".
func (s *Schema) Validate(payload []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("data is not JSON: %w", err)
	}
	err = s.schema.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	leaf := deepest(ve)
	path := "data"
	for _, tok := range leaf.InstanceLocation {
		path += "/" + tok
	}
	rule := strings.Join(leaf.ErrorKind.KeywordPath(), "/")
	return fmt.Errorf("%s: %s (rule %q)", path, leafMessage(leaf), rule)
}

// deepest follows the first cause down to the error that says what failed.
func deepest(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return ve
}

// leafMessage says what rule failed. A number rule's numbers are written
// exactly, as JSON has them: the library wrote them as doubles in
// x/text's notation, so 1e400 was "got ∞", 1000001 against a maximum of
// 1000000 "got 1.000001×10⁰⁶, want 1×10⁰⁶", and two integers past 2^53
// that differ by one the same number twice.
func leafMessage(ve *jsonschema.ValidationError) string {
	if rule, got, want, ok := numberRule(ve.ErrorKind); ok {
		return fmt.Sprintf("%s: got %s, want %s", rule, exactNumber(got), exactNumber(want))
	}
	return ve.ErrorKind.LocalizedString(english)
}

// numberRule is a failed rule that compares numbers, with them.
func numberRule(k jsonschema.ErrorKind) (rule string, got, want *big.Rat, ok bool) {
	switch k := k.(type) {
	case *kind.Minimum:
		return "minimum", k.Got, k.Want, true
	case *kind.Maximum:
		return "maximum", k.Got, k.Want, true
	case *kind.ExclusiveMinimum:
		return "exclusiveMinimum", k.Got, k.Want, true
	case *kind.ExclusiveMaximum:
		return "exclusiveMaximum", k.Got, k.Want, true
	case *kind.MultipleOf:
		return "multipleOf", k.Got, k.Want, true
	}
	return "", nil, nil, false
}

// maxExactDigits bounds a number written in full; a longer one is
// written with an exponent, to 20 significant digits.
const maxExactDigits = 24

// exactNumber writes a JSON number (a decimal, so exact in full) in
// full when that is short, else as 1.5e+400.
func exactNumber(r *big.Rat) string {
	if r.IsInt() {
		if s := r.Num().String(); len(s) <= maxExactDigits {
			return s
		}
	} else if places, exact := r.FloatPrec(); exact {
		if s := r.FloatString(places); len(s) <= maxExactDigits {
			return s
		}
	}
	return new(big.Float).SetPrec(256).SetRat(r).Text('g', 20)
}

var english = message.NewPrinter(language.English)
