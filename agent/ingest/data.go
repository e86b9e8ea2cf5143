package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/types/known/structpb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// body returns the bytes an event delivers and their content type: the
// payload as is, or data (any JSON value) encoded as compact JSON. A
// request sets exactly one of the two (an empty payload is none: proto3
// cannot tell it from unset; data null is a body); data is JSON, so its
// content type is too.
func body(req *rivorav1.PublishRequest, maxPayload int) (payload []byte, contentType string, err error) {
	data := req.GetData()
	if data == nil {
		if len(req.GetPayload()) == 0 {
			return nil, "", errors.New("the event has no body: set payload (bytes) or data (a JSON value)")
		}
		if n := len(req.GetPayload()); n > maxPayload {
			return nil, "", fmt.Errorf("payload is %d bytes; the limit is %d", n, maxPayload)
		}
		return req.GetPayload(), req.GetContentType(), nil
	}
	if len(req.GetPayload()) > 0 {
		return nil, "", errors.New("set payload (bytes) or data (a JSON value), not both")
	}
	if ct := req.GetContentType(); ct != "" && ct != defaultContentType {
		return nil, "", fmt.Errorf("data is delivered as %s; content_type %q needs payload (bytes) instead", defaultContentType, ct)
	}
	payload, err = compactJSON(data)
	if err != nil {
		return nil, "", err
	}
	if len(payload) > maxPayload {
		return nil, "", fmt.Errorf("data is %d bytes as JSON; the limit is %d", len(payload), maxPayload)
	}
	return payload, defaultContentType, nil
}

// compactJSON encodes v with no spaces, object keys sorted, and <, >, &
// as themselves: what a receiver verifying the signature hashes is what
// it reads. Numbers are JSON's doubles (integers are exact up to 2^53).
func compactJSON(v *structpb.Value) ([]byte, error) {
	if err := checkValue(v, "data"); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v.AsInterface()); err != nil {
		return nil, fmt.Errorf("encode data as JSON: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// checkValue refuses what JSON cannot carry — a value with no kind (only
// a binary client can send one) and NaN or infinite numbers — naming
// where it is.
func checkValue(v *structpb.Value, at string) error {
	switch k := v.GetKind().(type) {
	case nil:
		return fmt.Errorf("%s has no value (set one of null, number, string, bool, object or list)", at)
	case *structpb.Value_NumberValue:
		if math.IsNaN(k.NumberValue) || math.IsInf(k.NumberValue, 0) {
			return fmt.Errorf("%s is %v, which JSON cannot carry", at, k.NumberValue)
		}
	case *structpb.Value_StructValue:
		for name, field := range k.StructValue.GetFields() {
			if err := checkValue(field, at+"."+name); err != nil {
				return err
			}
		}
	case *structpb.Value_ListValue:
		for i, item := range k.ListValue.GetValues() {
			if err := checkValue(item, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}
