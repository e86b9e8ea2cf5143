package controlplane

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivora/rivora/internal/bounds"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/routing"
)

// The event-type catalogue behind EventTypeService
// (subscriptions_endpoint.go serves it): what publishers send and what
// customers subscribe to, each type with a description and an optional
// JSON Schema its events' data must satisfy. Kept in the store like
// destinations and changed through change; the agents get the whole
// catalogue on every change (feed.go), so it is bounded.

const (
	// MaxEventTypes bounds the catalogue.
	MaxEventTypes = 1000
	// MaxCatalogueSchemaBytes bounds the schemas of the whole catalogue,
	// which every agent is sent whole on each change.
	MaxCatalogueSchemaBytes = 2 << 20
)

// eventTypeNotFound is the answer for a type not in the catalogue.
func eventTypeNotFound(name string) error {
	return errorf(ErrNotFound, "event type %q is not in the catalogue; see `rivoractl event-types list`", name)
}

// checkEventTypeFields checks a description and a schema ("" = none): a
// schema must compile (JSON Schema draft 2020-12 or the draft its $schema
// names, routing.Drafts; no external refs) and
// hold no reference cycle (routing.CheckSchema).
func checkEventTypeFields(description, schema string) error {
	if len(description) > bounds.Text {
		return errorf(ErrInvalid, "description is %d bytes; the limit is %d", len(description), bounds.Text)
	}
	if schema != "" {
		if err := routing.CheckSchema(schema); err != nil {
			return tag(ErrInvalid, err)
		}
	}
	return nil
}

// checkCatalogueBounds refuses a catalogue over MaxEventTypes types or
// MaxCatalogueSchemaBytes of schemas.
func checkCatalogueBounds(tx *DestinationTx) error {
	n, size := 0, 0
	tx.EventTypes().Each(func(t *rivorav1.EventType) {
		n++
		size += len(t.GetSchema())
	})
	if n > MaxEventTypes {
		return limitReached("event_types", MaxEventTypes, "the catalogue would hold %d event types; the limit is %d", n, MaxEventTypes)
	}
	if size > MaxCatalogueSchemaBytes {
		return limitReached("catalogue_schema_bytes", MaxCatalogueSchemaBytes, "the catalogue's schemas would take %d bytes; the limit is %d (every agent is sent the whole catalogue): shorten schemas or drop unused types", size, MaxCatalogueSchemaBytes)
	}
	return nil
}

func (cp *ControlPlane) createEventType(m *rivorav1.CreateEventTypeRequest, who actor) (*rivorav1.EventType, uint64, error) {
	if err := routing.ValidateType(m.GetName()); err != nil {
		return nil, 0, tag(ErrInvalid, err)
	}
	if err := checkEventTypeFields(m.GetDescription(), m.GetSchema()); err != nil {
		return nil, 0, err
	}
	now := timestamppb.New(cp.now())
	t := &rivorav1.EventType{Name: m.GetName(), Description: m.GetDescription(), Schema: m.GetSchema(), CreatedAt: now, UpdatedAt: now}
	version, err := cp.change("event_type.create", "", who, "", func(tx *DestinationTx) (string, error) {
		if tx.EventTypes().Has(t.Name) {
			return "", errorf(ErrExists, "event type %q is in the catalogue already; change it with `rivoractl event-types update %s`", t.Name, t.Name)
		}
		tx.EventTypes().Put(t)
		if err := checkCatalogueBounds(tx); err != nil {
			return "", err
		}
		detail := "event type " + t.Name + " created"
		if t.Schema != "" {
			detail += fmt.Sprintf(" with a schema of %d bytes", len(t.Schema))
		}
		return detail, nil
	})
	return t, version, err
}

func (cp *ControlPlane) eventType(name string) (*rivorav1.EventType, error) {
	t, ok := cp.store.GetEventType(name)
	if !ok {
		return nil, eventTypeNotFound(name)
	}
	return t, nil
}

// eventTypes lists the catalogue, deprecated types only with
// includeDeprecated.
func (cp *ControlPlane) eventTypes(includeDeprecated bool) []*rivorav1.EventType {
	var out []*rivorav1.EventType
	for _, t := range cp.store.EventTypes() {
		if includeDeprecated || !t.GetDeprecated() {
			out = append(out, t)
		}
	}
	return out
}

// changeEventType is change for one type of the catalogue: fn edits t
// and says what it changed.
func (cp *ControlPlane) changeEventType(action, name string, who actor, fn func(t *rivorav1.EventType) (string, error)) (*rivorav1.EventType, uint64, error) {
	var updated *rivorav1.EventType
	version, err := cp.change(action, "", who, "", func(tx *DestinationTx) (string, error) {
		t, ok := tx.EventTypes().Get(name)
		if !ok {
			return "", eventTypeNotFound(name)
		}
		detail, err := fn(t)
		if err != nil {
			return "", err
		}
		if err := checkCatalogueBounds(tx); err != nil {
			return "", err
		}
		t.UpdatedAt = timestamppb.New(cp.now())
		updated = t
		return "event type " + name + ": " + detail, nil
	})
	return updated, version, err
}

func (cp *ControlPlane) updateEventType(m *rivorav1.UpdateEventTypeRequest, who actor) (*rivorav1.EventType, uint64, error) {
	if err := checkEventTypeFields(m.GetDescription(), m.GetSchema()); err != nil {
		return nil, 0, err
	}
	return cp.changeEventType("event_type.update", m.GetName(), who, func(t *rivorav1.EventType) (string, error) {
		var changes []string
		if m.Description != nil {
			t.Description = m.GetDescription()
			changes = append(changes, "description")
		}
		if m.Schema != nil {
			t.Schema = m.GetSchema()
			changes = append(changes, fmt.Sprintf("schema (%d bytes)", len(t.Schema)))
		}
		if len(changes) == 0 {
			return "", tag(ErrInvalid, errors.New("nothing to update: set --description or --schema"))
		}
		return strings.Join(changes, ", ") + " replaced", nil
	})
}

func (cp *ControlPlane) deprecateEventType(name string, undo bool, who actor) (*rivorav1.EventType, uint64, error) {
	return cp.changeEventType("event_type.deprecate", name, who, func(t *rivorav1.EventType) (string, error) {
		if t.GetDeprecated() != undo {
			if undo {
				return "", errorf(ErrPrecondition, "event type %q is not deprecated", name)
			}
			return "", errorf(ErrPrecondition, "event type %q is deprecated already", name)
		}
		t.Deprecated = !undo
		if undo {
			return "no longer deprecated", nil
		}
		return "deprecated", nil
	})
}
