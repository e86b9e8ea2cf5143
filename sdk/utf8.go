package sdk

import (
	"context"
	"fmt"
	"strconv"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// validUTF8 refuses a request with a string field that is not valid UTF-8
// before it is sent, as invalid_argument naming the field. Protobuf cannot
// encode such a string: marshalling would fail with an internal error that
// names no field (a subscription's filter or a header value read from a
// file in another encoding, say). Publish checks its events itself, with
// the names its callers use (checkUTF8), and is not walked again here.
func validUTF8() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if m, ok := req.Any().(proto.Message); ok && req.Spec().IsClient && !checkedByPublish(m) {
				if path := invalidUTF8(m.ProtoReflect(), ""); path != "" {
					return nil, connect.NewError(connect.CodeInvalidArgument,
						fmt.Errorf("rivora %s: field %s is not valid UTF-8", req.Spec().Procedure, path))
				}
			}
			return next(ctx, req)
		}
	}
}

func checkedByPublish(m proto.Message) bool {
	switch m.(type) {
	case *rivorav1.PublishRequest, *rivorav1.PublishBatchRequest:
		return true
	}
	return false
}

// invalidUTF8 is the path of the first string in m that is not valid
// UTF-8 (prefix + field names, list indexes and map keys), "" when all are.
func invalidUTF8(m protoreflect.Message, prefix string) (path string) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := prefix + string(fd.Name())
		switch {
		case fd.IsList():
			list := v.List()
			for i := range list.Len() {
				if path = invalidValue(fd, list.Get(i), name+"["+strconv.Itoa(i)+"]"); path != "" {
					break
				}
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				key := k.String()
				if fd.MapKey().Kind() == protoreflect.StringKind && !utf8.ValidString(key) {
					path = name + " (a key)"
					return false
				}
				path = invalidValue(fd.MapValue(), mv, name+"["+strconv.Quote(key)+"]")
				return path == ""
			})
		default:
			path = invalidValue(fd, v, name)
		}
		return path == ""
	})
	return path
}

// invalidValue is invalidUTF8 for one value of field fd (a list's item or
// a map's value included).
func invalidValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if !utf8.ValidString(v.String()) {
			return path
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return invalidUTF8(v.Message(), path+".")
	}
	return ""
}
