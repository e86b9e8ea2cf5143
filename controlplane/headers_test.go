package controlplane_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rivora/rivora/internal/auth"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func hdr(name, value string) *rivorav1.Header { return &rivorav1.Header{Name: name, Value: value} }

// Custom headers: names in canonical form, values on the agents' feed
// only (answers carry fingerprints), the audit names them without values.
func TestCustomHeaders(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	created := d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL, Headers: []*rivorav1.Header{
		hdr("x-tenant", "42"), hdr("Authorization", "Bearer s3cret-token"),
	}})
	want := []string{"Authorization: " + auth.Fingerprint("Bearer s3cret-token"), "X-Tenant: " + auth.Fingerprint("42")}
	shown := func(ds *rivorav1.Destination) []string {
		var out []string
		for _, h := range ds.GetHeaders() {
			if h.GetValue() != "" {
				t.Fatalf("an answer shows the value of header %s", h.GetName())
			}
			out = append(out, h.GetName()+": "+h.GetValueFingerprint())
		}
		return out
	}
	if got := shown(created.GetDestination()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("create answers headers %v, want %v", got, want)
	}
	feed := watchOnce(t, d).GetDestinations()[0].GetHeaders()
	if len(feed) != 2 || feed[0].GetName() != "Authorization" || feed[0].GetValue() != "Bearer s3cret-token" || feed[1].GetName() != "X-Tenant" || feed[1].GetValue() != "42" {
		t.Fatalf("the feed carries headers %v, want both with their values", feed)
	}

	upd, err := d.Admin.UpdateDestination(context.Background(), connect.NewRequest(&rivorav1.UpdateDestinationRequest{
		Id: "orders", SetHeaders: []*rivorav1.Header{hdr("X-TENANT", "43"), hdr("X-Region", "eu")}, RemoveHeaders: []string{"authorization"},
	}))
	if err != nil {
		t.Fatalf("update headers: %v", err)
	}
	want = []string{"X-Region: " + auth.Fingerprint("eu"), "X-Tenant: " + auth.Fingerprint("43")}
	if got := shown(upd.Msg.GetDestination()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("update answers headers %v, want %v", got, want)
	}
	l, err := d.Admin.ListDestinations(context.Background(), connect.NewRequest(&rivorav1.ListDestinationsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if got := shown(l.Msg.GetDestinations()[0]); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("list answers headers %v, want %v", got, want)
	}

	audit, err := d.Admin.ListAudit(context.Background(), connect.NewRequest(&rivorav1.ListAuditRequest{DestinationId: "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	var details []string
	for _, e := range audit.Msg.GetEntries() {
		details = append(details, e.GetDetail())
		for _, v := range []string{"s3cret-token", "Bearer", `"42"`, `"43"`} {
			if strings.Contains(e.String(), v) {
				t.Fatalf("audit entry %v shows a header value", e)
			}
		}
	}
	all := strings.Join(details, " | ")
	for _, m := range []string{"headers Authorization, X-Tenant", "header Authorization removed", "header X-Tenant set", "header X-Region set"} {
		if !strings.Contains(all, m) {
			t.Errorf("audit details %q lack %q", all, m)
		}
	}
}

func TestCustomHeaderValidation(t *testing.T) {
	t.Parallel()
	d := startDev(t, t.TempDir(), false)
	many := make([]*rivorav1.Header, 33)
	for i := range many {
		many[i] = hdr(fmt.Sprintf("X-H%d", i), "v")
	}
	for _, c := range []struct {
		name     string
		headers  []*rivorav1.Header
		mentions []string
	}{
		{"webhook-id", []*rivorav1.Header{hdr("webhook-id", "x")}, []string{`header "webhook-id" is reserved`, "Standard Webhooks"}},
		{"Webhook-Signature", []*rivorav1.Header{hdr("Webhook-Signature", "v1,x")}, []string{"reserved"}},
		{"rivora-attempt", []*rivorav1.Header{hdr("Rivora-Attempt", "1")}, []string{"reserved", "rivora-*"}},
		{"content-type", []*rivorav1.Header{hdr("Content-Type", "text/plain")}, []string{"reserved", "content_type"}},
		{"content-length", []*rivorav1.Header{hdr("content-length", "1")}, []string{"reserved"}},
		{"host", []*rivorav1.Header{hdr("Host", "evil")}, []string{"reserved", "URL"}},
		{"user-agent", []*rivorav1.Header{hdr("User-Agent", "x")}, []string{"reserved"}},
		{"idempotency-key", []*rivorav1.Header{hdr("Idempotency-Key", "x")}, []string{"reserved", "event id"}},
		{"traceparent", []*rivorav1.Header{hdr("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}, []string{"reserved", "W3C trace context"}},
		{"tracestate", []*rivorav1.Header{hdr("tracestate", "k=v")}, []string{"reserved", "W3C trace context"}},
		{"connection", []*rivorav1.Header{hdr("Connection", "close")}, []string{"hop-by-hop"}},
		{"transfer-encoding", []*rivorav1.Header{hdr("Transfer-Encoding", "chunked")}, []string{"hop-by-hop"}},
		{"te", []*rivorav1.Header{hdr("TE", "trailers")}, []string{"hop-by-hop"}},
		{"upgrade", []*rivorav1.Header{hdr("Upgrade", "h2c")}, []string{"hop-by-hop"}},
		{"proxy-authorization", []*rivorav1.Header{hdr("Proxy-Authorization", "x")}, []string{"reserved", "proxies"}},
		{"name with a space", []*rivorav1.Header{hdr("X Tenant", "1")}, []string{`"X"…`, "not allowed"}},
		{"value typed without its colon", []*rivorav1.Header{hdr("Authorization Bearer s3cr3t", "x")}, []string{`"Authorization"…`, "not allowed"}},
		{"name with a colon", []*rivorav1.Header{hdr("X:Tenant", "1")}, []string{"not allowed"}},
		{"empty name", []*rivorav1.Header{hdr("", "1")}, []string{"empty name"}},
		{"long name", []*rivorav1.Header{hdr(strings.Repeat("x", 300), "1")}, []string{"300 bytes"}},
		{"CRLF in value", []*rivorav1.Header{hdr("X-A", "a\r\nX-Injected: 1")}, []string{`header "X-A"`, "control character"}},
		{"NUL in value", []*rivorav1.Header{hdr("X-A", "a\x00")}, []string{"control character"}},
		{"empty value", []*rivorav1.Header{hdr("X-A", "")}, []string{"empty value"}},
		{"value over 4 KiB", []*rivorav1.Header{hdr("X-A", strings.Repeat("v", 4097))}, []string{"4097 bytes", "4096"}},
		{"twice", []*rivorav1.Header{hdr("X-A", "1"), hdr("x-a", "2")}, []string{"named twice"}},
		{"33 headers", many, []string{"33 custom headers", "at most 32"}},
	} {
		_, err := d.Admin.CreateDestination(context.Background(), connect.NewRequest(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL, Headers: c.headers}))
		wantCode(t, "create with "+c.name, err, connect.CodeInvalidArgument, c.mentions...)
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("create with %s: the error echoes the value: %v", c.name, err)
		}
	}

	d.create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: sink(t).URL, Headers: []*rivorav1.Header{hdr("X-A", "1")}})
	for _, c := range []struct {
		name     string
		req      *rivorav1.UpdateDestinationRequest
		mentions []string
	}{
		{"set webhook-id", &rivorav1.UpdateDestinationRequest{Id: "orders", SetHeaders: []*rivorav1.Header{hdr("webhook-id", "x")}}, []string{"reserved"}},
		{"remove a missing one", &rivorav1.UpdateDestinationRequest{Id: "orders", RemoveHeaders: []string{"X-B"}}, []string{`"X-B"`, "no such header", "X-A"}},
		{"set and remove", &rivorav1.UpdateDestinationRequest{Id: "orders", SetHeaders: []*rivorav1.Header{hdr("X-A", "2")}, RemoveHeaders: []string{"x-a"}}, []string{"named twice"}},
		{"remove a bad name", &rivorav1.UpdateDestinationRequest{Id: "orders", RemoveHeaders: []string{"X A"}}, []string{"not allowed"}},
		{"too many", &rivorav1.UpdateDestinationRequest{Id: "orders", SetHeaders: many[:32]}, []string{"33 custom headers"}},
	} {
		_, err := d.Admin.UpdateDestination(context.Background(), connect.NewRequest(c.req))
		wantCode(t, "update: "+c.name, err, connect.CodeInvalidArgument, c.mentions...)
	}
	if fd := watchOnce(t, d).GetDestinations()[0].GetHeaders(); len(fd) != 1 || fd[0].GetName() != "X-A" || fd[0].GetValue() != "1" {
		t.Fatalf("refused updates changed the headers: %v", fd)
	}
}

// In process, with the agent: the custom headers reach the partner on
// every attempt.
func TestCustomHeadersAreSent(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		if r.Header.Get("Rivora-Attempt") == "1" {
			w.WriteHeader(http.StatusInternalServerError) // the retry carries them too
		}
	}))
	t.Cleanup(srv.Close)
	d := startDev(t, t.TempDir(), true)
	d.Create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: srv.URL, Headers: []*rivorav1.Header{hdr("Authorization", "Bearer abc"), hdr("X-Tenant", "a, b")}})
	if _, err := d.Ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "u", Type: "t", Payload: []byte(`{}`)})); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		select {
		case h := <-got:
			if h.Get("Authorization") != "Bearer abc" || h.Get("X-Tenant") != "a, b" || h.Get("Webhook-Id") == "" {
				t.Fatalf("attempt %d headers %v, want the custom ones beside Rivora's", attempt, h)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no attempt %d within 20s", attempt)
		}
	}
}
