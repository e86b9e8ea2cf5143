package webhook_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivora/rivora/sdk/webhook"
)

// During a rotation's grace a delivery carries the new and the previous
// signature, so a receiver holding either secret verifies it; from the
// grace's end (checked against the delivery's timestamp) only the new one.
func TestWithPreviousSignsBothUntilTheGraceEnds(t *testing.T) {
	newSecret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	current, err := webhook.NewSigner(newSecret)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Unix(vectorTimestamp, 0).Add(time.Hour)
	rotating, err := current.WithPrevious(vectorSecret, until)
	if err != nil {
		t.Fatalf("WithPrevious: %v", err)
	}
	body := []byte(vectorBody)
	verifier := func(secret string, at time.Time) *webhook.Verifier {
		v, err := webhook.NewVerifier(secret)
		if err != nil {
			t.Fatal(err)
		}
		return v.WithClock(func() time.Time { return at })
	}

	during := vectorTimestamp
	sig := rotating.Sign(vectorID, during, body)
	want := current.Sign(vectorID, during, body) + " " + vectorSignature
	if sig != want {
		t.Fatalf("Sign during the grace = %q, want %q (new first, then previous, space separated)", sig, want)
	}
	for name, secret := range map[string]string{"new": newSecret, "previous": vectorSecret} {
		if err := verifier(secret, time.Unix(during, 0)).Verify(headers(vectorID, during, sig), body); err != nil {
			t.Errorf("during the grace, the %s secret does not verify: %v", name, err)
		}
	}

	for _, after := range []int64{until.Unix(), until.Unix() + 3600} {
		sig := rotating.Sign(vectorID, after, body)
		if strings.Contains(sig, " ") || sig != current.Sign(vectorID, after, body) {
			t.Fatalf("Sign at %d (grace ended at %d) = %q, want the new signature alone", after, until.Unix(), sig)
		}
		if err := verifier(newSecret, time.Unix(after, 0)).Verify(headers(vectorID, after, sig), body); err != nil {
			t.Errorf("after the grace, the new secret does not verify: %v", err)
		}
		if err := verifier(vectorSecret, time.Unix(after, 0)).Verify(headers(vectorID, after, sig), body); !errors.Is(err, webhook.ErrNoMatch) {
			t.Errorf("after the grace, the previous secret verifies (err %v), want ErrNoMatch", err)
		}
	}

	// The signer it came from is unchanged.
	if got := current.Sign(vectorID, during, body); strings.Contains(got, " ") {
		t.Fatalf("WithPrevious changed its receiver: %q", got)
	}
}

func TestWithPreviousRefusesABadSecret(t *testing.T) {
	s, err := webhook.NewSigner(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WithPrevious("hunter2", time.Now().Add(time.Hour)); err == nil || !strings.Contains(err.Error(), "previous secret") {
		t.Fatalf("WithPrevious(bad) = %v, want an error naming the previous secret", err)
	}
}
