package bounds

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// fieldLimits bounds request string fields by name, wherever they appear
// (nested messages, lists and maps included); a string field not named
// here gets Other. Shorter rules of a field's own (ids, lane keys, event
// types) are its handler's to check; these are the ceiling no stored
// value may pass.
var fieldLimits = map[protoreflect.Name]int{
	"url":          URL,
	"address":      URL,
	"reason":       Text,
	"pause_reason": Text,
	"description":  Text,
	"detail":       Text,
	"secret":       Secret,
	"author":       Name,
	"name":         Name,
	"created_by":   Name,
	// schema: an event type's JSON Schema (routing.MaxSchemaLen).
	"schema": 64 << 10,
	// A client certificate's chain or a pinned CA bundle, and its key.
	"certificate_pem": PEM,
	"key_pem":         KeyPEM,
}

// Other bounds a request string field fieldLimits does not name.
const Other = 4 << 10

// CheckStrings checks every string of a request message (and every map
// key) against its limit, and returns the first one over, as
// "url is 5242880 bytes; the limit is 2048" (nested fields by their path:
// "events[3].lane_key"). It allocates nothing while all is well (it runs
// on every ingest batch).
func CheckStrings(m proto.Message) error {
	var v *violation
	switch m := m.(type) {
	case *rivorav1.PublishRequest:
		v = checkPublish(m)
	case *rivorav1.PublishBatchRequest:
		// The hot path: ~1 µs an event by reflection, nothing by hand.
		for i, ev := range m.GetEvents() {
			if v = checkPublish(ev); v != nil {
				v.in(fmt.Sprintf("[%d]", i)).in("events")
				break
			}
		}
	default:
		v = checkMessage(m.ProtoReflect())
	}
	if v != nil {
		return fmt.Errorf("%s is %d bytes; the limit is %d", v.path(), v.size, v.limit)
	}
	return nil
}

// checkPublish is checkMessage for a PublishRequest, by hand
// (TestPublishFastPathCoversEveryField keeps it complete).
func checkPublish(ev *rivorav1.PublishRequest) *violation {
	for _, f := range [...]struct {
		name, value string
	}{
		{"destination_id", ev.GetDestinationId()}, {"customer_id", ev.GetCustomerId()}, {"lane_key", ev.GetLaneKey()},
		{"type", ev.GetType()}, {"content_type", ev.GetContentType()}, {"idempotency_key", ev.GetIdempotencyKey()},
		{"subscription_id", ev.GetSubscriptionId()},
	} {
		if len(f.value) > Other {
			return (&violation{size: len(f.value), limit: Other}).in(f.name)
		}
	}
	return nil
}

// violation is a string over its limit; its path is collected on the way
// out, innermost first.
type violation struct {
	parts       []string
	size, limit int
}

func (v *violation) in(part string) *violation {
	v.parts = append(v.parts, part)
	return v
}

func (v *violation) path() string {
	var b strings.Builder
	for i := len(v.parts) - 1; i >= 0; i-- {
		p := v.parts[i]
		if b.Len() > 0 && !strings.HasPrefix(p, "[") && !strings.HasPrefix(p, " ") {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

func checkMessage(m protoreflect.Message) (v *violation) {
	m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		switch {
		case fd.IsList():
			list := val.List()
			for i := 0; i < list.Len() && v == nil; i++ {
				if v = checkValue(fd, list.Get(i)); v != nil {
					v.in(fmt.Sprintf("[%d]", i))
				}
			}
		case fd.IsMap():
			val.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapKey().Kind() == protoreflect.StringKind {
					if key := k.String(); len(key) > Other {
						v = (&violation{size: len(key), limit: Other}).in(" key")
						return false
					}
				}
				if v = checkValue(fd.MapValue(), mv); v != nil {
					v.in(fmt.Sprintf("[%.32q]", k.String()))
				}
				return v == nil
			})
		default:
			v = checkValue(fd, val)
		}
		if v != nil {
			v.in(string(fd.Name()))
		}
		return v == nil
	})
	return v
}

func checkValue(fd protoreflect.FieldDescriptor, val protoreflect.Value) *violation {
	switch fd.Kind() {
	case protoreflect.StringKind:
		limit, ok := fieldLimits[fd.Name()]
		if !ok {
			limit = Other
		}
		if n := len(val.String()); n > limit {
			return &violation{size: n, limit: limit}
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkMessage(val.Message())
	}
	return nil
}

// Interceptor refuses, with InvalidArgument, a request (unary, or each
// message a stream receives) that carries a string over its limit
// (CheckStrings), before any handler sees it.
func Interceptor() connect.Interceptor { return stringsInterceptor{} }

type stringsInterceptor struct{}

func (stringsInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if m, ok := req.Any().(proto.Message); ok && !req.Spec().IsClient {
			if err := CheckStrings(m); err != nil {
				return nil, invalid(err)
			}
		}
		return next(ctx, req)
	}
}

func (stringsInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (stringsInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, checkedConn{conn})
	}
}

type checkedConn struct{ connect.StreamingHandlerConn }

func (c checkedConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	if m, ok := msg.(proto.Message); ok {
		if err := CheckStrings(m); err != nil {
			return invalid(err)
		}
	}
	return nil
}

func invalid(err error) error { return connect.NewError(connect.CodeInvalidArgument, err) }
