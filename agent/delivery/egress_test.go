package delivery_test

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/internal/ssrf"
	"github.com/rivora/rivora/testkit/connectproxy"
)

// TestEgressProxy: through --egress-proxy every delivery is a CONNECT to
// the address the agent resolved and the guard allowed (an IP, never the
// name); a name resolving to a denied address is refused by the guard
// before the proxy is asked; the no-proxy list dials directly.
func TestEgressProxy(t *testing.T) {
	srv, got := partner(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	port := strings.TrimPrefix(srv.URL, "http://127.0.0.1:")
	dns := startDNS(t, map[string][]netip.Addr{
		"partner.rivora.test.":  {netip.MustParseAddr("127.0.0.1")},
		"internal.rivora.test.": {netip.MustParseAddr("10.0.0.5")},
		"direct.rivora.test.":   {netip.MustParseAddr("127.0.0.1")},
	})
	proxy := connectproxy.Start(t)
	egress, err := delivery.ParseEgressProxy(proxy.URL(), []string{"direct.rivora.test"})
	if err != nil {
		t.Fatal(err)
	}
	s := delivery.NewSender("ua", ssrf.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}), delivery.WithResolver(dns.resolver()), delivery.WithEgressProxy(egress))
	send := func(host string) delivery.Result {
		return s.Send(context.Background(), delivery.Request{Endpoint: endpoint(t, "http://"+host+":"+port+"/hook"), Event: event(), Attempt: 1, Timeout: 5 * time.Second})
	}

	if res := send("partner.rivora.test"); !res.OK() {
		t.Fatalf("through the proxy: %+v, want delivered", res)
	}
	if r := <-got; r.host != "partner.rivora.test:"+port {
		t.Fatalf("the partner saw Host %q, want the URL's host", r.host)
	}
	if targets := proxy.Targets(); len(targets) != 1 || targets[0] != "127.0.0.1:"+port {
		t.Fatalf("the proxy was asked for %v, want one CONNECT to the resolved address 127.0.0.1:%s", targets, port)
	}

	res := send("internal.rivora.test")
	if !res.NotSent || res.Err == nil || !strings.Contains(res.Err.Error(), "refused by SSRF guard: 10.0.0.5 is in 10.0.0.0/8") {
		t.Fatalf("a name resolving to a denied address through the proxy: %+v, want the guard's refusal", res)
	}
	if n := len(proxy.Targets()); n != 1 {
		t.Fatalf("the proxy was asked %d times, want the refused name never sent to it", n)
	}

	if res := send("direct.rivora.test"); !res.OK() {
		t.Fatalf("a no-proxy host: %+v, want delivered", res)
	}
	<-got
	if n := len(proxy.Targets()); n != 1 {
		t.Fatalf("a no-proxy host went through the proxy (%d CONNECTs)", n)
	}
}

// TestParseEgressProxy refuses what is not an http://HOST:PORT proxy, and
// never echoes a password.
func TestParseEgressProxy(t *testing.T) {
	for _, raw := range []string{"https://proxy:3128", "proxy:3128", "http://proxy", "http://user:hunter2@proxy/x", "http://user:hunter2@proxy:3128/%zz", "::bad"} {
		_, err := delivery.ParseEgressProxy(raw, nil)
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseEgressProxy(%q) = %v, want a refusal without the password", raw, err)
		}
	}
	// What cannot be parsed is shown as given, but for a password.
	_, err := delivery.ParseEgressProxy("::bad", nil)
	if err == nil || !strings.Contains(err.Error(), `"::bad"`) {
		t.Errorf("ParseEgressProxy(::bad) = %v, want the value shown", err)
	}
	_, err = delivery.ParseEgressProxy("http://user:hunter2@proxy:3128/%zz", nil)
	if err == nil || !strings.Contains(err.Error(), "proxy:3128") {
		t.Errorf("ParseEgressProxy(unparsable with a password) = %v, want the host shown", err)
	}
	if _, err := delivery.ParseEgressProxy("http://proxy:3128", []string{"10.0.0.0/33"}); err == nil {
		t.Error("a bad no-proxy CIDR was accepted")
	}
	p, err := delivery.ParseEgressProxy("http://u:hunter2@proxy:3128", []string{".corp.example", "10.0.0.0/8"})
	if err != nil || strings.Contains(p.String(), "hunter2") || !strings.Contains(p.String(), "corp.example") {
		t.Fatalf("ParseEgressProxy = %v, %v", p, err)
	}
}
