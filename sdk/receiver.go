package sdk

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/rivora/rivora/sdk/webhook"
)

// MaxBodyBytes bounds how much of a webhook body VerifyRequest reads. Rivora
// refuses payloads above 256 KiB at ingest by default; this leaves room for
// operators who raise that limit while still refusing unbounded bodies.
const MaxBodyBytes = 4 << 20

// ErrBodyTooLarge is returned by VerifyRequest for bodies over MaxBodyBytes.
var ErrBodyTooLarge = errors.New("webhook: body larger than sdk.MaxBodyBytes")

// VerifyRequest reads r's body (at most MaxBodyBytes) and checks its
// Standard Webhooks signature against secret ("whsec_…", as printed by
// `rivoractl destinations create`). It returns the body only when the
// signature matches and the timestamp is within webhook.DefaultTolerance;
// errors wrap webhook.ErrMissingHeaders, webhook.ErrInvalidTimestamp,
// webhook.ErrNoMatch or ErrBodyTooLarge. Deliveries are at least once:
// dedupe on the webhook-id header.
func VerifyRequest(secret string, r *http.Request) ([]byte, error) {
	v, err := webhook.NewVerifier(secret)
	if err != nil {
		return nil, err
	}
	return verify(v, r)
}

func verify(v *webhook.Verifier, r *http.Request) ([]byte, error) {
	if r == nil || r.Body == nil {
		return nil, fmt.Errorf("webhook: request has no body")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("webhook: read body: %w", err)
	}
	if len(body) > MaxBodyBytes {
		return nil, ErrBodyTooLarge
	}
	if err := v.Verify(r.Header, body); err != nil {
		return nil, err
	}
	return body, nil
}

// NewHandler returns an http.Handler that verifies every request with secret
// and passes verified ones to fn, with the body already read (r.Body is
// reset to it as well). Rivora delivers with POST: any other method gets
// 405. Unsigned, tampered or stale requests get 401, bodies over
// MaxBodyBytes get 413, and fn is not called. Answer 2xx from fn once the
// event is handled; anything else makes Rivora retry it.
//
// Deliveries are at least once, and a verified request can be sent again
// within the timestamp tolerance (a retry, or a replay by whoever saw it):
// fn should dedupe on the webhook-id header, which is the same on every
// copy of one event.
func NewHandler(secret string, fn func(w http.ResponseWriter, r *http.Request, body []byte)) (http.Handler, error) {
	v, err := webhook.NewVerifier(secret)
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, errors.New("sdk.NewHandler: fn is nil")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "webhooks are delivered with POST", http.StatusMethodNotAllowed)
			return
		}
		body, err := verify(v, r)
		switch {
		case errors.Is(err, ErrBodyTooLarge):
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		case errors.Is(err, webhook.ErrMissingHeaders), errors.Is(err, webhook.ErrInvalidTimestamp), errors.Is(err, webhook.ErrNoMatch), errors.Is(err, webhook.ErrTooManySignatures):
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		fn(w, r, body)
	}), nil
}
