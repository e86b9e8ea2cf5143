package routing

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// MaxSchemaLen bounds a schema's text.
const MaxSchemaLen = 64 << 10

// Schema is a compiled JSON Schema (draft 2020-12 unless it names another
// with $schema) for an event type's data.
type Schema struct {
	schema *jsonschema.Schema
}

// noLoader refuses every external reference: a schema must be self-contained
// (a $ref to a URL would make the control plane or an agent fetch it).
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external reference %s: schemas must be self-contained ($ref within the document only)", url)
}

// CompileSchema compiles a JSON Schema document.
func CompileSchema(source string) (*Schema, error) {
	if len(source) > MaxSchemaLen {
		return nil, fmt.Errorf("schema is %d bytes; the limit is %d", len(source), MaxSchemaLen)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(source))
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	const url = "rivora:///schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, compileError(err)
	}
	return &Schema{schema: s}, nil
}

// compileError says why a schema does not compile. One that breaks the
// JSON Schema metaschema names where, in the schema, and what is wrong
// ("schema at /properties/amount/minimum: got string, want number"), not
// the library's internal document URL.
func compileError(err error) error {
	var sve *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if !errors.As(err, &sve) || !errors.As(sve.Err, &ve) {
		return fmt.Errorf("schema does not compile: %w", err)
	}
	leaf := deepest(ve)
	at := "/" + strings.Join(leaf.InstanceLocation, "/")
	return fmt.Errorf("schema at %s is not a valid JSON Schema (draft 2020-12): %s", at, leafMessage(leaf))
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

func leafMessage(ve *jsonschema.ValidationError) string {
	return ve.ErrorKind.LocalizedString(english)
}

var english = message.NewPrinter(language.English)
