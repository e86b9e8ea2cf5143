package subscriptions

import (
	"fmt"
	"sync/atomic"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/routing"
)

// Catalogue is the cell's event types, with their compiled schemas, and
// whether types outside it are refused (--strict-event-types).
type Catalogue struct {
	current atomic.Pointer[catalogue]
}

type catalogue struct {
	types  map[string]*routing.Schema // nil value: a type without schema
	strict bool
}

// NewCatalogue returns an empty, lenient catalogue.
func NewCatalogue() *Catalogue {
	c := &Catalogue{}
	c.current.Store(&catalogue{types: map[string]*routing.Schema{}})
	return c
}

// Replace installs the whole catalogue. A schema that does not compile
// here (it compiled on the control plane) is an error: the caller keeps
// the previous catalogue.
func (c *Catalogue) Replace(list []*rivorav1.EventType, strict bool) error {
	next := &catalogue{types: make(map[string]*routing.Schema, len(list)), strict: strict}
	for _, et := range list {
		var schema *routing.Schema
		if src := et.GetSchema(); src != "" {
			s, err := routing.CompileSchema(src)
			if err != nil {
				return fmt.Errorf("event type %q: %w", et.GetName(), err)
			}
			schema = s
		}
		next.types[et.GetName()] = schema
	}
	c.current.Store(next)
	return nil
}

// Check validates one event against the catalogue: its type must be in it
// when the catalogue is strict, and its payload must satisfy the type's
// schema when it has one (json: the payload is JSON; a schema'd type with
// a non-JSON content type is refused).
func (c *Catalogue) Check(typ string, payload []byte, json bool) error {
	cur := c.current.Load()
	schema, known := cur.types[typ]
	switch {
	case !known && cur.strict:
		return fmt.Errorf("event type %q is not in the catalogue, and this cell refuses unknown types (--strict-event-types); add it with `rivoractl event-types create %s`", typ, typ)
	case schema == nil:
		return nil
	case !json:
		return fmt.Errorf("event type %q has a JSON Schema, so its payload must be JSON (content type application/json)", typ)
	}
	if err := schema.Validate(payload); err != nil {
		return fmt.Errorf("data does not match the schema of event type %q: %w", typ, err)
	}
	return nil
}
