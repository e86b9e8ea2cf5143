package bounds_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rivora/rivora/internal/bounds"
)

const (
	unaryPath  = "/rivora.test.v1.Echo/Unary"
	streamPath = "/rivora.test.v1.Echo/Stream"
)

// startEcho serves a unary and a server-streaming echo behind
// bounds.Handler, as every Rivora service is, over HTTP/1.1 and h2c.
func startEcho(t *testing.T) string {
	t.Helper()
	opts := []connect.HandlerOption{bounds.ReadMax(bounds.DefaultMessage)}
	mux := http.NewServeMux()
	mux.Handle(unaryPath, bounds.Handler(bounds.DefaultMessage, connect.NewUnaryHandler(unaryPath,
		func(_ context.Context, r *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(wrapperspb.String("echo " + r.Msg.GetValue())), nil
		}, opts...)))
	mux.Handle(streamPath, bounds.Handler(bounds.DefaultMessage, connect.NewServerStreamHandler(streamPath,
		func(_ context.Context, r *connect.Request[wrapperspb.StringValue], s *connect.ServerStream[wrapperspb.StringValue]) error {
			return s.Send(wrapperspb.String("echo " + r.Msg.GetValue()))
		}, opts...)))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func httpClient(t *testing.T, h2c bool) *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	if h2c {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// envelope frames msg with flags as the enveloped protocols do.
func envelope(flags byte, msg []byte) []byte {
	b := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

func hello(t *testing.T) []byte {
	b, err := proto.Marshal(wrapperspb.String("hello"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// outcome is what a client learns from a response: the RPC's code, its
// message, and the messages it carried.
type outcome struct {
	code     connect.Code // 0 for OK
	message  string
	messages []string
}

// protocol sends a raw request body in one of Connect's wire protocols
// and reads the outcome the way that protocol's clients do.
type protocol struct {
	name        string
	path        string
	contentType string
	header      http.Header
	read        func(t *testing.T, resp *http.Response) outcome
}

var enveloped = []protocol{
	{"grpc unary", unaryPath, "application/grpc", http.Header{"Te": {"trailers"}}, readGRPC},
	{"grpc stream", streamPath, "application/grpc", http.Header{"Te": {"trailers"}}, readGRPC},
	{"grpc-web unary", unaryPath, "application/grpc-web+proto", nil, readGRPCWeb},
	{"grpc-web stream", streamPath, "application/grpc-web+proto", nil, readGRPCWeb},
	{"connect stream", streamPath, "application/connect+proto", http.Header{"Connect-Protocol-Version": {"1"}}, readConnectStream},
}

// encodingHeader is the header naming a request's compression in p.
func (p protocol) encodingHeader() string {
	if strings.HasPrefix(p.contentType, "application/connect+") {
		return "Connect-Content-Encoding"
	}
	return "Grpc-Encoding"
}

func (p protocol) send(t *testing.T, client *http.Client, url string, body []byte, extra http.Header) outcome {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+p.path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", p.contentType)
	for k, v := range p.header {
		req.Header[k] = v
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	defer resp.Body.Close()
	return p.read(t, resp)
}

// readEnvelopes splits a response body into its envelopes.
func readEnvelopes(t *testing.T, body []byte) (flags []byte, msgs [][]byte) {
	t.Helper()
	for len(body) > 0 {
		if len(body) < 5 {
			t.Fatalf("response: %d bytes left, short of an envelope prefix", len(body))
		}
		n := int(binary.BigEndian.Uint32(body[1:5]))
		if len(body) < 5+n {
			t.Fatalf("response: envelope promises %d bytes, %d left", n, len(body)-5)
		}
		msg := body[5 : 5+n]
		if body[0]&1 != 0 { // compressed: the server answers gzip to gzip
			zr, err := gzip.NewReader(bytes.NewReader(msg))
			if err != nil {
				t.Fatalf("response: %v", err)
			}
			if msg, err = io.ReadAll(zr); err != nil {
				t.Fatalf("response: %v", err)
			}
		}
		flags, msgs = append(flags, body[0]), append(msgs, msg)
		body = body[5+n:]
	}
	return flags, msgs
}

func unmarshalString(t *testing.T, b []byte) string {
	t.Helper()
	var s wrapperspb.StringValue
	if err := proto.Unmarshal(b, &s); err != nil {
		t.Fatalf("response message: %v", err)
	}
	return s.GetValue()
}

func grpcOutcome(t *testing.T, h http.Header, msgs []string) outcome {
	t.Helper()
	st := h.Get("Grpc-Status")
	code, err := strconv.Atoi(st)
	if err != nil {
		t.Fatalf("grpc-status %q: %v", st, err)
	}
	return outcome{connect.Code(code), h.Get("Grpc-Message"), msgs}
}

func readGRPC(t *testing.T, resp *http.Response) outcome {
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	_, raw := readEnvelopes(t, body)
	var msgs []string
	for _, m := range raw {
		msgs = append(msgs, unmarshalString(t, m))
	}
	h := resp.Trailer
	if h.Get("Grpc-Status") == "" { // trailers-only
		h = resp.Header
	}
	return grpcOutcome(t, h, msgs)
}

func readGRPCWeb(t *testing.T, resp *http.Response) outcome {
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	flags, raw := readEnvelopes(t, body)
	var msgs []string
	for i, m := range raw {
		if flags[i]&0x80 == 0 {
			msgs = append(msgs, unmarshalString(t, m))
			continue
		}
		tr, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(append(m, '\r', '\n')))).ReadMIMEHeader()
		if err != nil {
			t.Fatalf("grpc-web trailers %q: %v", m, err)
		}
		return grpcOutcome(t, http.Header(tr), msgs)
	}
	return grpcOutcome(t, resp.Header, msgs) // trailers-only
}

func readConnectStream(t *testing.T, resp *http.Response) outcome {
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	flags, raw := readEnvelopes(t, body)
	var msgs []string
	for i, m := range raw {
		if flags[i]&0x02 == 0 {
			msgs = append(msgs, unmarshalString(t, m))
			continue
		}
		var end struct {
			Error *struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(m, &end); err != nil {
			t.Fatalf("end of stream %q: %v", m, err)
		}
		if end.Error == nil {
			return outcome{0, "", msgs}
		}
		return outcome{connectCode(t, end.Error.Code), end.Error.Message, msgs}
	}
	t.Fatalf("connect stream: no end-of-stream message in %q", body)
	return outcome{}
}

func connectCode(t *testing.T, name string) connect.Code {
	t.Helper()
	var c connect.Code
	if err := c.UnmarshalText([]byte(name)); err != nil {
		t.Fatalf("code %q: %v", name, err)
	}
	return c
}

// A malformed envelope is the client's fault and is answered
// InvalidArgument with what is wrong, in every enveloped protocol (issue
// 22: connect-go answers Internal, "protocol error", and reads the body
// before any interceptor runs); a well-formed one, plain or compressed,
// is served as before.
func TestMalformedEnvelopeIsInvalidArgument(t *testing.T) {
	url := startEcho(t)
	msg := hello(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(msg)
	_ = zw.Close()

	malformed := []malformedBody{
		{"body shorter than the prefix promises", envelope(0, msg)[:5+3], "3 of the 7 message bytes"},
		{"prefix cut short", []byte{0, 0, 0}, "3 bytes into the 5-byte envelope prefix"},
		{"compressed flag without an encoding", envelope(1, gz.Bytes()), "names no compression"},
		{"a response's flags", envelope(0x80, nil), "flags 0x80"},
		{"unknown flags", envelope(0x04, msg), "flags 0x04"},
		{"a whole message then a cut prefix", append(envelope(0, msg), 0, 0), "2 bytes into the 5-byte envelope prefix"},
	}
	h2c, http1 := httpClient(t, true), httpClient(t, false)
	for _, p := range enveloped {
		t.Run(p.name, func(t *testing.T) {
			checkEnvelopes(t, p, h2c, "h2c", url, msg, gz.Bytes(), malformed)
			if p.contentType != "application/grpc" { // gRPC is HTTP/2 only
				checkEnvelopes(t, p, http1, "HTTP/1.1", url, msg, gz.Bytes(), malformed)
			}
		})
	}
}

type malformedBody struct {
	what string
	body []byte
	want string // in the error's message
}

func checkEnvelopes(t *testing.T, p protocol, client *http.Client, via string, url string, msg, gz []byte, malformed []malformedBody) {
	t.Helper()
	got := p.send(t, client, url, envelope(0, msg), nil)
	if got.code != 0 || len(got.messages) != 1 || got.messages[0] != "echo hello" {
		t.Fatalf("%s: well-formed: %+v, want OK with one \"echo hello\"", via, got)
	}
	got = p.send(t, client, url, envelope(1, gz), http.Header{p.encodingHeader(): {"gzip"}})
	if got.code != 0 || len(got.messages) != 1 || got.messages[0] != "echo hello" {
		t.Fatalf("%s: well-formed, gzip: %+v, want OK with one \"echo hello\"", via, got)
	}
	for _, m := range malformed {
		got := p.send(t, client, url, m.body, nil)
		if got.code != connect.CodeInvalidArgument || !strings.Contains(got.message, m.want) || len(got.messages) != 0 {
			t.Errorf("%s: %s: %v %q (messages %q), want invalid_argument containing %q", via, m.what, got.code, got.message, got.messages, m.want)
		}
	}
	// A message over the bound stays ResourceExhausted.
	big := envelope(0, nil)
	binary.BigEndian.PutUint32(big[1:], bounds.DefaultMessage+1)
	if got := p.send(t, client, url, big, nil); got.code != connect.CodeResourceExhausted {
		t.Errorf("%s: oversized: %v %q, want resource_exhausted", via, got.code, got.message)
	}
}

func readConnectUnary(t *testing.T, resp *http.Response) outcome {
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		return outcome{0, "", []string{unmarshalString(t, body)}}
	}
	var e struct{ Code, Message string }
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("connect error %d %q: %v", resp.StatusCode, body, err)
	}
	return outcome{connectCode(t, e.Code), e.Message, nil}
}

// The Connect protocol's unary form has no envelopes: a body that is not
// a message was already InvalidArgument, and stays so.
func TestConnectUnaryMalformedBody(t *testing.T) {
	url := startEcho(t)
	client := httpClient(t, true)
	p := protocol{"connect unary", unaryPath, "application/proto", http.Header{"Connect-Protocol-Version": {"1"}}, readConnectUnary}
	if got := p.send(t, client, url, hello(t), nil); got.code != 0 || len(got.messages) != 1 || got.messages[0] != "echo hello" {
		t.Fatalf("well-formed: %+v", got)
	}
	if got := p.send(t, client, url, []byte{0x0a, 0x09, 'h'}, nil); got.code != connect.CodeInvalidArgument {
		t.Errorf("a cut message: %v %q, want invalid_argument", got.code, got.message)
	}
}
