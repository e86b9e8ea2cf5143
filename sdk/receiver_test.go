package sdk_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/sdk/webhook"
)

// The Standard Webhooks reference test vector.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = int64(1614265330)
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func signedRequest(t *testing.T, secret, id string, ts int64, signedBody, sentBody string) *http.Request {
	t.Helper()
	s, err := webhook.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	return requestWith(id, ts, s.Sign(id, ts, []byte(signedBody)), sentBody)
}

func requestWith(id string, ts int64, sig, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(body))
	r.Header.Set(webhook.HeaderID, id)
	r.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	r.Header.Set(webhook.HeaderSignature, sig)
	return r
}

func TestStandardWebhooksVector(t *testing.T) {
	v, err := webhook.NewVerifier(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	v = v.WithClock(func() time.Time { return time.Unix(vectorTimestamp, 0) })
	r := requestWith(vectorID, vectorTimestamp, vectorSignature, vectorBody)
	if err := v.Verify(r.Header, []byte(vectorBody)); err != nil {
		t.Fatalf("vector rejected: %v", err)
	}
	if err := v.Verify(r.Header, []byte(`{"test": 2432232315}`)); !errors.Is(err, webhook.ErrNoMatch) {
		t.Fatalf("tampered vector body: err = %v, want ErrNoMatch", err)
	}
}

func TestVerifyRequest(t *testing.T) {
	now := time.Now().Unix()
	body := `{"order":1}`
	tests := []struct {
		name    string
		req     *http.Request
		wantErr error
	}{
		{"fresh and signed", signedRequest(t, vectorSecret, "evt_1", now, body, body), nil},
		{"tampered body", signedRequest(t, vectorSecret, "evt_1", now, body, `{"order":2}`), webhook.ErrNoMatch},
		{"wrong secret", signedRequest(t, "whsec_"+strings.Repeat("A", 43)+"=", "evt_1", now, body, body), webhook.ErrNoMatch},
		// The reference vector is correctly signed but from 2021: too old.
		{"stale timestamp", requestWith(vectorID, vectorTimestamp, vectorSignature, vectorBody), webhook.ErrInvalidTimestamp},
		{"unsigned", httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(body)), webhook.ErrMissingHeaders},
		{"too large", signedRequest(t, vectorSecret, "evt_1", now, "", strings.Repeat("x", sdk.MaxBodyBytes+1)), sdk.ErrBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sdk.VerifyRequest(vectorSecret, tt.req)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("VerifyRequest err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && string(got) != body {
				t.Fatalf("VerifyRequest body = %q, want %q", got, body)
			}
			if tt.wantErr != nil && got != nil {
				t.Fatalf("VerifyRequest returned a body with an error")
			}
		})
	}
}

func TestVerifyRequestBadSecret(t *testing.T) {
	r := signedRequest(t, vectorSecret, "evt_1", time.Now().Unix(), "{}", "{}")
	if _, err := sdk.VerifyRequest("not-a-secret", r); err == nil {
		t.Fatal("VerifyRequest with a malformed secret succeeded")
	}
}

func TestHandler(t *testing.T) {
	var gotBody, gotReread []byte
	calls := 0
	h, err := sdk.NewHandler(vectorSecret, func(w http.ResponseWriter, r *http.Request, body []byte) {
		calls++
		gotBody = body
		gotReread, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusNoContent)
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	now := time.Now().Unix()
	body := `{"order":1}`
	tests := []struct {
		name      string
		req       *http.Request
		wantCode  int
		wantCalls int
	}{
		{"verified", signedRequest(t, vectorSecret, "evt_1", now, body, body), http.StatusNoContent, 1},
		{"tampered body", signedRequest(t, vectorSecret, "evt_2", now, body, `{"order":666}`), http.StatusUnauthorized, 0},
		{"wrong secret", signedRequest(t, "whsec_"+strings.Repeat("B", 43)+"=", "evt_3", now, body, body), http.StatusUnauthorized, 0},
		{"stale", requestWith(vectorID, vectorTimestamp, vectorSignature, vectorBody), http.StatusUnauthorized, 0},
		{"unsigned", httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)), http.StatusUnauthorized, 0},
		{"not a POST", func() *http.Request {
			r := signedRequest(t, vectorSecret, "evt_5", now, body, body)
			r.Method = http.MethodGet
			return r
		}(), http.StatusMethodNotAllowed, 0},
		{"too large", signedRequest(t, vectorSecret, "evt_4", now, "", strings.Repeat("x", sdk.MaxBodyBytes+1)), http.StatusRequestEntityTooLarge, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls, gotBody, gotReread = 0, nil, nil
			body, _ := io.ReadAll(tt.req.Body)
			req, err := http.NewRequestWithContext(t.Context(), tt.req.Method, srv.URL, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header = tt.req.Header
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tt.wantCode)
			}
			if calls != tt.wantCalls {
				t.Fatalf("fn called %d times, want %d", calls, tt.wantCalls)
			}
			if tt.wantCalls == 1 && (string(gotBody) != string(body) || string(gotReread) != string(body)) {
				t.Fatalf("fn got body %q and r.Body %q, want %q for both", gotBody, gotReread, body)
			}
		})
	}
}

func TestNewHandlerRefusesBadInput(t *testing.T) {
	if _, err := sdk.NewHandler("whsec_!!", func(http.ResponseWriter, *http.Request, []byte) {}); err == nil {
		t.Fatal("NewHandler accepted a malformed secret")
	}
	if _, err := sdk.NewHandler(vectorSecret, nil); err == nil {
		t.Fatal("NewHandler accepted a nil fn")
	}
}

// A secret read from a file or pasted keeps its newline or space; the
// verifier does not count it as part of the secret.
func TestVerifyRequestTrimsTheSecret(t *testing.T) {
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	for _, padded := range []string{secret + " ", " " + secret, secret + "\n", "\t" + secret + "\r\n"} {
		r := signedRequest(t, secret, "evt_1", time.Now().Unix(), `{"ok":true}`, `{"ok":true}`)
		if _, err := sdk.VerifyRequest(padded, r); err != nil {
			t.Errorf("VerifyRequest(%q) = %v", padded, err)
		}
	}
}
