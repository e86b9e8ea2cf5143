package partner_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/sdk/webhook"
	"github.com/rivora/rivora/testkit/partner"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// post sends one webhook as Rivora would, signed with key ("" unsigned).
func post(ctx context.Context, t *testing.T, url, id, key string) (int, string) {
	t.Helper()
	body := []byte(`{"n":1}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("rivora-customer", "acme")
	req.Header.Set("rivora-lane", "u1")
	req.Header.Set("rivora-attempt", "1")
	req.Header.Set("user-agent", "rivora/test (agent-1)")
	if key != "" {
		s, err := webhook.NewSigner(key)
		if err != nil {
			t.Fatal(err)
		}
		ts := time.Now().Unix()
		req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(webhook.HeaderSignature, s.Sign(id, ts, body))
	}
	req.Header.Set(webhook.HeaderID, id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestVerifiesAndRecords(t *testing.T) {
	ctx := context.Background()
	p, err := partner.Start(partner.Options{Secret: secret, RefusalBody: "no"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if code, _ := post(ctx, t, p.URL(), "evt_1", secret); code != 200 {
		t.Fatalf("signed request answered %d, want 200", code)
	}
	if code, _ := post(ctx, t, p.URL(), "evt_2", ""); code != http.StatusUnauthorized {
		t.Fatalf("unsigned request answered %d, want 401", code)
	}
	if probs := p.Problems(); len(probs) != 1 || !strings.Contains(probs[0], "evt_2") {
		t.Fatalf("problems %v, want one for evt_2", probs)
	}
	reqs := p.Requests()
	if len(reqs) != 1 || reqs[0].ID != "evt_1" || reqs[0].Lane != "acme/u1" || reqs[0].Agent != "agent-1" || reqs[0].Attempt != 1 || reqs[0].Sent != 1 || string(reqs[0].Payload) != `{"n":1}` {
		t.Fatalf("requests %+v, want evt_1 recorded", reqs)
	}
	if p.Count() != 2 || p.Delivered() != 1 || p.OK("evt_1") != 1 || len(p.Missing([]string{"evt_1", "evt_2"})) != 1 {
		t.Fatalf("count %d, delivered %d, ok %d; want 2, 1, 1", p.Count(), p.Delivered(), p.OK("evt_1"))
	}
}

func TestAnswerStatusAndCountOnly(t *testing.T) {
	ctx := context.Background()
	p := partner.New(t, partner.Options{CountOnly: true, RefusalBody: "no", Answer: func(r partner.Request) int {
		if r.Sent == 1 {
			return http.StatusServiceUnavailable
		}
		return 0
	}})
	if code, body := post(ctx, t, p.DestURL("orders"), "evt_1", ""); code != 503 || body != "no" {
		t.Fatalf("first request answered %d %q, want 503 \"no\"", code, body)
	}
	if code, _ := post(ctx, t, p.URL(), "evt_1", ""); code != 200 {
		t.Fatalf("second request answered %d, want 200", code)
	}
	p.SetStatus(http.StatusGone)
	if code, _ := post(ctx, t, p.URL(), "evt_1", ""); code != 410 {
		t.Fatalf("third request answered %d, want the set 410", code)
	}
	if len(p.Requests()) != 0 || p.Count() != 3 || p.Sent("evt_1") != 3 || p.Delivered() != 1 || p.Duplicates() != 0 {
		t.Fatalf("count only: %d recorded, count %d, sent %d, delivered %d", len(p.Requests()), p.Count(), p.Sent("evt_1"), p.Delivered())
	}
	if _, ok := p.DeliveredAt("evt_1"); !ok {
		t.Fatal("no first 2xx time for evt_1")
	}
}

func TestHangUpLoses(t *testing.T) {
	p := partner.New(t, partner.Options{Delay: time.Minute, HangUpLoses: true})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if code, _ := post(ctx, t, p.URL(), "evt_1", ""); code != 0 {
		t.Fatalf("held request answered %d before the client gave up", code)
	}
	p.SetDelay(0)
	if err := p.AwaitDelivered([]string{"evt_1"}, 50*time.Millisecond); err == nil || p.Delivered() != 0 {
		t.Fatalf("a request whose sender hung up counts as delivered (%v)", err)
	}
	if reqs := p.Requests(); len(reqs) != 1 || reqs[0].Status != 0 {
		t.Fatalf("requests %+v, want one unanswered", reqs)
	}
}
