package webhook_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

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

func vectorClock() time.Time { return time.Unix(vectorTimestamp, 0) }

func headers(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	h.Set(webhook.HeaderID, id)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(webhook.HeaderSignature, sig)
	return h
}

func vectorVerifier(t *testing.T) *webhook.Verifier {
	t.Helper()
	v, err := webhook.NewVerifier(vectorSecret)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v.WithClock(vectorClock)
}

func TestSignMatchesStandardWebhooksVector(t *testing.T) {
	s, err := webhook.NewSigner(vectorSecret)
	if err != nil {
		t.Fatalf("NewSigner: %v", err)
	}
	if got := s.Sign(vectorID, vectorTimestamp, []byte(vectorBody)); got != vectorSignature {
		t.Fatalf("Sign = %q, want %q", got, vectorSignature)
	}
}

func TestVerifyStandardWebhooksVector(t *testing.T) {
	v := vectorVerifier(t)
	if err := v.Verify(headers(vectorID, vectorTimestamp, vectorSignature), []byte(vectorBody)); err != nil {
		t.Fatalf("Verify(vector) = %v, want nil", err)
	}
}

func TestVerifyRejects(t *testing.T) {
	other, err := webhook.NewSecret()
	if err != nil {
		t.Fatalf("NewSecret: %v", err)
	}
	otherSigner, err := webhook.NewSigner(other)
	if err != nil {
		t.Fatalf("NewSigner: %v", err)
	}
	wrongSecretSig := otherSigner.Sign(vectorID, vectorTimestamp, []byte(vectorBody))

	tests := []struct {
		name string
		h    http.Header
		body string
		want error
	}{
		{"tampered body", headers(vectorID, vectorTimestamp, vectorSignature), `{"test": 2432232315}`, webhook.ErrNoMatch},
		{"tampered id", headers(vectorID+"x", vectorTimestamp, vectorSignature), vectorBody, webhook.ErrNoMatch},
		{"wrong secret", headers(vectorID, vectorTimestamp, wrongSecretSig), vectorBody, webhook.ErrNoMatch},
		{"unknown version only", headers(vectorID, vectorTimestamp, strings.Replace(vectorSignature, "v1,", "v2,", 1)), vectorBody, webhook.ErrNoMatch},
		{"garbage signature", headers(vectorID, vectorTimestamp, "v1,!!!not-base64"), vectorBody, webhook.ErrNoMatch},
		{"stale timestamp", headers(vectorID, vectorTimestamp-int64(webhook.DefaultTolerance/time.Second)-1, vectorSignature), vectorBody, webhook.ErrInvalidTimestamp},
		{"future timestamp", headers(vectorID, vectorTimestamp+int64(webhook.DefaultTolerance/time.Second)+1, vectorSignature), vectorBody, webhook.ErrInvalidTimestamp},
		{"timestamp not a number", func() http.Header {
			h := headers(vectorID, 0, vectorSignature)
			h.Set(webhook.HeaderTimestamp, "yesterday")
			return h
		}(), vectorBody, webhook.ErrInvalidTimestamp},
		{"timestamp with a sign", func() http.Header {
			h := headers(vectorID, 0, vectorSignature)
			h.Set(webhook.HeaderTimestamp, "+"+strconv.FormatInt(vectorTimestamp, 10))
			return h
		}(), vectorBody, webhook.ErrInvalidTimestamp},
		{"timestamp with a leading zero", func() http.Header {
			h := headers(vectorID, 0, vectorSignature)
			h.Set(webhook.HeaderTimestamp, "0"+strconv.FormatInt(vectorTimestamp, 10))
			return h
		}(), vectorBody, webhook.ErrInvalidTimestamp},
		{"missing id", func() http.Header {
			h := headers(vectorID, vectorTimestamp, vectorSignature)
			h.Del(webhook.HeaderID)
			return h
		}(), vectorBody, webhook.ErrMissingHeaders},
		{"missing signature", func() http.Header {
			h := headers(vectorID, vectorTimestamp, vectorSignature)
			h.Del(webhook.HeaderSignature)
			return h
		}(), vectorBody, webhook.ErrMissingHeaders},
	}
	v := vectorVerifier(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := v.Verify(tt.h, []byte(tt.body))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestVerifyRealClockRejectsOldVector(t *testing.T) {
	v, err := webhook.NewVerifier(vectorSecret)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	err = v.Verify(headers(vectorID, vectorTimestamp, vectorSignature), []byte(vectorBody))
	if !errors.Is(err, webhook.ErrInvalidTimestamp) {
		t.Fatalf("Verify with the real clock = %v, want ErrInvalidTimestamp", err)
	}
	// A wide enough tolerance accepts it again.
	wide := v.WithTolerance(time.Since(vectorClock()) + time.Hour)
	if err := wide.Verify(headers(vectorID, vectorTimestamp, vectorSignature), []byte(vectorBody)); err != nil {
		t.Fatalf("Verify with wide tolerance = %v", err)
	}
}

func TestVerifyAcceptsAnyMatchDuringRotation(t *testing.T) {
	old, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	oldSigner, err := webhook.NewSigner(old)
	if err != nil {
		t.Fatal(err)
	}
	sigs := oldSigner.Sign(vectorID, vectorTimestamp, []byte(vectorBody)) + " v2,abc " + vectorSignature
	if err := vectorVerifier(t).Verify(headers(vectorID, vectorTimestamp, sigs), []byte(vectorBody)); err != nil {
		t.Fatalf("Verify with rotated signatures = %v", err)
	}
}

func TestNewSecretRoundTrip(t *testing.T) {
	secret, err := webhook.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	key, err := webhook.Key(secret)
	if err != nil {
		t.Fatalf("Key(NewSecret()) = %v", err)
	}
	if len(key) != 32 {
		t.Fatalf("key is %d bytes, want 32", len(key))
	}
	s, err := webhook.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	v, err := webhook.NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	body := []byte(`{"ok":true}`)
	if err := v.Verify(headers("evt_1", now, s.Sign("evt_1", now, body)), body); err != nil {
		t.Fatalf("Verify(fresh signature) = %v", err)
	}
}

func TestKeyRejectsMalformedSecrets(t *testing.T) {
	short := webhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("short"))
	for _, secret := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_***", short} {
		if _, err := webhook.Key(secret); err == nil {
			t.Errorf("Key(%q) = nil error, want an error", secret)
		}
		if _, err := webhook.NewVerifier(secret); err == nil {
			t.Errorf("NewVerifier(%q) = nil error, want an error", secret)
		}
	}
}

// A signature header sent as two lines is one list: the match may be on
// the second line.
func TestVerifyReadsEverySignatureLine(t *testing.T) {
	h := headers(vectorID, vectorTimestamp, "v1,bm90LXRoaXMtb25l")
	h.Add(webhook.HeaderSignature, vectorSignature)
	if err := vectorVerifier(t).Verify(h, []byte(vectorBody)); err != nil {
		t.Fatalf("Verify with the match on a second header line = %v", err)
	}
}

// TestVerifyReadsCommaJoinedLines: an intermediary that merges repeated
// header lines joins them with ", "; the match is found on either side of
// the join, as the TypeScript SDK finds it.
func TestVerifyReadsCommaJoinedLines(t *testing.T) {
	v := vectorVerifier(t)
	for _, sig := range []string{
		vectorSignature + ", v1,AAAA",
		"v1,AAAA, " + vectorSignature,
		"v1,AAAA,, " + vectorSignature + ",",
	} {
		if err := v.Verify(headers(vectorID, vectorTimestamp, sig), []byte(vectorBody)); err != nil {
			t.Errorf("Verify(%q) = %v, want nil", sig, err)
		}
	}
	// The join does not make a signature of another secret match.
	sig := "v1,bm90LXRoaXMtb25l, v1,AAAA"
	if err := v.Verify(headers(vectorID, vectorTimestamp, sig), []byte(vectorBody)); !errors.Is(err, webhook.ErrNoMatch) {
		t.Errorf("Verify(%q) = %v, want ErrNoMatch", sig, err)
	}
}

// A zero or nil Verifier, or a zero Signer, answers rather than panics; a
// tolerance of zero or below keeps the verifier's own.
func TestZeroValuesAnswer(t *testing.T) {
	h := headers(vectorID, vectorTimestamp, vectorSignature)
	if err := (&webhook.Verifier{}).Verify(h, []byte(vectorBody)); !errors.Is(err, webhook.ErrNoKey) {
		t.Fatalf("zero Verifier: %v, want ErrNoKey", err)
	}
	var nilVerifier *webhook.Verifier
	if err := nilVerifier.Verify(h, []byte(vectorBody)); !errors.Is(err, webhook.ErrNoKey) {
		t.Fatalf("nil Verifier: %v, want ErrNoKey", err)
	}
	if err := nilVerifier.WithTolerance(time.Minute).Verify(h, []byte(vectorBody)); !errors.Is(err, webhook.ErrNoKey) {
		t.Fatalf("nil Verifier's WithTolerance: %v, want ErrNoKey", err)
	}
	if err := nilVerifier.WithClock(vectorClock).Verify(h, []byte(vectorBody)); !errors.Is(err, webhook.ErrNoKey) {
		t.Fatalf("nil Verifier's WithClock: %v, want ErrNoKey", err)
	}
	if got := (&webhook.Signer{}).Sign(vectorID, vectorTimestamp, []byte(vectorBody)); got != "" {
		t.Fatalf("zero Signer signed %q", got)
	}
	if err := vectorVerifier(t).WithTolerance(-time.Minute).Verify(h, []byte(vectorBody)); err != nil {
		t.Fatalf("WithTolerance(-1m) refused the vector at its own time: %v", err)
	}
}

// A receiver given the signing key is told to use the public key.
func TestNewVerifierWithASigningKeyNamesThePublicKey(t *testing.T) {
	signing, _, err := webhook.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	_, err = webhook.NewVerifier(signing)
	if err == nil || !strings.Contains(err.Error(), webhook.PublicKeyPrefix) {
		t.Fatalf("NewVerifier(whsk_…) = %v, want an error naming %q", err, webhook.PublicKeyPrefix)
	}
	if _, err := webhook.NewVerifier("nope"); err == nil || !strings.Contains(err.Error(), webhook.PublicKeyPrefix) {
		t.Fatalf("NewVerifier(nope) = %v, want it to name both prefixes", err)
	}
}

// A timestamp in another unit than seconds is named as such, never as an
// offset (time.Duration saturates 292 years out: "off by
// -2562047h47m16.854775808s"); one a clock could be off by keeps its
// offset.
func TestVerifyNamesATimestampThatIsNotSeconds(t *testing.T) {
	now := time.Unix(1765000000, 0)
	v := vectorVerifier(t).WithClock(func() time.Time { return now })
	for _, tc := range []struct {
		ts   int64
		want string
	}{
		{1765000000000, "timestamp 1765000000000 is not Unix seconds (milliseconds?)"},
		{1765000000000000, "timestamp 1765000000000000 is not Unix seconds (microseconds?)"},
		{1765000000000000000, "timestamp 1765000000000000000 is not Unix seconds (nanoseconds?)"},
		{math.MaxInt64, "timestamp 9223372036854775807 is not Unix seconds (nanoseconds?)"},
		{20000000000, "timestamp 20000000000 is not Unix seconds (year 2603?)"},
		{253402300800, "timestamp 253402300800 is not Unix seconds (milliseconds?)"}, // year 10000
		{1765000000 + 3600, "off by -1h0m0s"},
		{1765000000 - 86400, "off by 24h0m0s"},
		{0, "off by 490277h46m40s"},
	} {
		err := v.Verify(headers(vectorID, tc.ts, vectorSignature), []byte(vectorBody))
		if !errors.Is(err, webhook.ErrInvalidTimestamp) || !strings.HasSuffix(err.Error(), ": "+tc.want) {
			t.Errorf("Verify(timestamp %d) = %v, want ErrInvalidTimestamp saying %q", tc.ts, err, tc.want)
		}
		if strings.Contains(fmt.Sprint(err), "2562047h") {
			t.Errorf("Verify(timestamp %d) printed a saturated duration: %v", tc.ts, err)
		}
	}
	// A clock set centuries ahead, as a test's may be.
	far := vectorVerifier(t).WithClock(func() time.Time { return time.Unix(vectorTimestamp, 0).AddDate(300, 0, 0) })
	err := far.Verify(headers(vectorID, vectorTimestamp, vectorSignature), []byte(vectorBody))
	if want := "timestamp 1614265330 is more than 292 years before now"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Verify 300 years on = %v, want it to say %q", err, want)
	}
	// A tolerance that takes in everything still does.
	if err := far.WithTolerance(math.MaxInt64).Verify(headers(vectorID, vectorTimestamp, vectorSignature), []byte(vectorBody)); err != nil {
		t.Errorf("Verify 300 years on with the largest tolerance = %v", err)
	}
}

// Whitespace around a secret or key (a newline from a file, a space from
// a paste) is not part of it, as around a token.
func TestSecretsAndKeysAreTrimmed(t *testing.T) {
	signing, public, err := webhook.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	edSigner, err := webhook.NewEd25519Signer(signing)
	if err != nil {
		t.Fatal(err)
	}
	v1a := edSigner.Sign(vectorID, vectorTimestamp, []byte(vectorBody))
	for _, pad := range []struct{ before, after string }{{"", " "}, {" ", ""}, {"", "\n"}, {"", "\r\n"}, {"\t", "\t"}, {" \n", "\n "}} {
		secret := pad.before + vectorSecret + pad.after
		if _, err := webhook.Key(secret); err != nil {
			t.Errorf("Key(%q) = %v", secret, err)
		}
		v, err := webhook.NewVerifier(secret)
		if err != nil {
			t.Errorf("NewVerifier(%q) = %v", secret, err)
		} else if err := v.WithClock(vectorClock).Verify(headers(vectorID, vectorTimestamp, vectorSignature), []byte(vectorBody)); err != nil {
			t.Errorf("NewVerifier(%q).Verify = %v", secret, err)
		}
		pk := pad.before + public + pad.after
		v, err = webhook.NewVerifier(pk)
		if err != nil {
			t.Errorf("NewVerifier(%q) = %v", pk, err)
		} else if err := v.WithClock(vectorClock).Verify(headers(vectorID, vectorTimestamp, v1a), []byte(vectorBody)); err != nil {
			t.Errorf("NewVerifier(%q).Verify = %v", pk, err)
		}
		if _, err := webhook.ParseSigningKey(pad.before + signing + pad.after); err != nil {
			t.Errorf("ParseSigningKey(padded) = %v", err)
		}
	}
	// Whitespace inside is still refused.
	if _, err := webhook.Key(strings.Replace(vectorSecret, "_", "_ ", 1)); err == nil {
		t.Errorf("Key with a space inside = nil error")
	}
}

// TestVerifyRefusesTooManySignatures: each entry costs a MAC (or an
// ed25519 verification); thousands from an unauthenticated sender are
// refused before any is checked, even with a matching one among them.
func TestVerifyRefusesTooManySignatures(t *testing.T) {
	v := vectorVerifier(t)
	bogus := strings.Repeat("v1a,AAAA ", webhook.MaxSignatures-1)
	if err := v.Verify(headers(vectorID, vectorTimestamp, bogus+vectorSignature), []byte(vectorBody)); err != nil {
		t.Fatalf("Verify(%d entries, the last matching) = %v, want nil", webhook.MaxSignatures, err)
	}
	over := headers(vectorID, vectorTimestamp, bogus+"v1,AAAA "+vectorSignature)
	if err := v.Verify(over, []byte(vectorBody)); !errors.Is(err, webhook.ErrTooManySignatures) {
		t.Fatalf("Verify(%d entries, the last matching) = %v, want ErrTooManySignatures", webhook.MaxSignatures+1, err)
	}
	// Entries over several header lines count together.
	lines := headers(vectorID, vectorTimestamp, bogus)
	lines.Add(webhook.HeaderSignature, "v1,AAAA "+vectorSignature)
	if err := v.Verify(lines, []byte(vectorBody)); !errors.Is(err, webhook.ErrTooManySignatures) {
		t.Fatalf("Verify(%d entries over two lines) = %v, want ErrTooManySignatures", webhook.MaxSignatures+1, err)
	}
}
