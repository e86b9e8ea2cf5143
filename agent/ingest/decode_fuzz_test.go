package ingest_test

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
)

// FuzzPublishDecode sends arbitrary bytes as the body of Publish and
// PublishBatch, as binary protobuf, as protojson and as a gRPC-web frame,
// through the real Connect handler: decoding, then validation (prepare),
// then storing. It never panics, and a Connect answer is never a server
// error: what does not parse or validate is the client's fault
// (4xx, InvalidArgument), what does is stored.
func FuzzPublishDecode(f *testing.F) {
	fx := newFixture(f)
	mux := http.NewServeMux()
	mux.Handle(rivorav1connect.NewIngestServiceHandler(fx.gw))
	one := valid()
	bin, _ := proto.Marshal(one)
	js, _ := protojson.Marshal(one)
	batch := &rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{one, {DestinationId: "../x"}, {}}}
	bbin, _ := proto.Marshal(batch)
	bjs, _ := protojson.Marshal(batch)
	for _, seed := range [][]byte{
		bin, js, bbin, bjs, nil, {}, []byte("{}"), []byte("null"), []byte(`{"events":[{}]}`),
		[]byte(`{"destinationId":"orders","customerId":"acme","laneKey":"\ud800","type":"t"}`),
		[]byte(`{"payload":"!!"}`), []byte(`{"events":null}`), {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f},
		{0x0a, 0x80}, append([]byte{0x0a, byte(len(bin))}, bin...),
	} {
		f.Add(seed)
	}
	procedures := []string{rivorav1connect.IngestServicePublishProcedure, rivorav1connect.IngestServicePublishBatchProcedure}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, proc := range procedures {
			for _, ct := range []string{"application/proto", "application/json"} {
				rec := post(mux, proc, ct, body)
				if rec.Code >= 500 {
					t.Fatalf("%s as %s: HTTP %d %s", proc, ct, rec.Code, rec.Body)
				}
			}
			// gRPC-web: the body as a whole frame (flags, length, message),
			// and the body as the message of a well-formed frame.
			framed := make([]byte, 5, 5+len(body))
			binary.BigEndian.PutUint32(framed[1:], uint32(len(body)))
			for _, b := range [][]byte{body, append(framed, body...)} {
				if rec := post(mux, proc, "application/grpc-web+proto", b); rec.Code >= 500 {
					t.Fatalf("%s as gRPC-web: HTTP %d %s", proc, rec.Code, rec.Body)
				}
			}
		}
	})
}

func post(h http.Handler, procedure, contentType string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, procedure, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
