package legacysig_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/rivora/rivora/internal/legacysig"
)

// TestSignFollowsTheContract: the signature is what a receiver written to
// the contract computes with the standard library.
func TestSignFollowsTheContract(t *testing.T) {
	body := []byte(`{"order":42}`)
	mac := func(content string) []byte {
		m := hmac.New(sha256.New, []byte("old-system-secret"))
		m.Write([]byte(content))
		return m.Sum(nil)
	}
	for _, tc := range []struct {
		c    legacysig.Contract
		want string
	}{
		{legacysig.Contract{Header: "X-Signature", Prefix: "sha256=", Secret: "old-system-secret"}, "sha256=" + hex.EncodeToString(mac(string(body)))},
		{legacysig.Contract{Header: "X-Sig", Template: "{id}.{timestamp}.{body}", Encoding: "base64", Secret: "old-system-secret"}, base64.StdEncoding.EncodeToString(mac("evt_1.1700000000." + string(body)))},
		{legacysig.Contract{Header: "X-Sig", Template: "t={timestamp},{body}", Secret: "old-system-secret"}, hex.EncodeToString(mac("t=1700000000," + string(body)))},
	} {
		s, err := legacysig.New(tc.c)
		if err != nil {
			t.Fatalf("New(%+v): %v", tc.c, err)
		}
		if got := s.Sign("evt_1", 1700000000, body); got != tc.want {
			t.Errorf("%+v: Sign = %q, want %q", tc.c, got, tc.want)
		}
	}
}

// TestNewRefusesBadContracts names the field at fault.
func TestNewRefusesBadContracts(t *testing.T) {
	ok := legacysig.Contract{Header: "X-Signature", Secret: "s"}
	for name, tc := range map[string]struct {
		mutate func(*legacysig.Contract)
		want   string
	}{
		"no header":       {func(c *legacysig.Contract) { c.Header = "" }, "header name is required"},
		"no secret":       {func(c *legacysig.Contract) { c.Secret = "" }, "secret is required"},
		"algorithm":       {func(c *legacysig.Contract) { c.Algorithm = "md5" }, `algorithm "md5"`},
		"encoding":        {func(c *legacysig.Contract) { c.Encoding = "base32" }, `encoding "base32"`},
		"no body":         {func(c *legacysig.Contract) { c.Template = "{id}" }, "must include {body}"},
		"unknown":         {func(c *legacysig.Contract) { c.Template = "{body}{user}" }, "unknown placeholder {user}"},
		"unclosed":        {func(c *legacysig.Contract) { c.Template = "{body" }, "without its }"},
		"prefix controls": {func(c *legacysig.Contract) { c.Prefix = "a\nb" }, "printable"},
	} {
		c := ok
		tc.mutate(&c)
		if _, err := legacysig.New(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
}

func TestParseEncoding(t *testing.T) {
	for spec, want := range map[string][2]string{"hex": {"", "hex"}, "sha256=hex": {"sha256=", "hex"}, "base64": {"", "base64"}, "v0=base64": {"v0=", "base64"}} {
		p, e, err := legacysig.ParseEncoding(spec)
		if err != nil || p != want[0] || e != want[1] {
			t.Errorf("ParseEncoding(%q) = %q, %q, %v; want %q", spec, p, e, err, want)
		}
	}
	if _, _, err := legacysig.ParseEncoding("sha256=b32"); err == nil {
		t.Error("ParseEncoding(sha256=b32) accepted")
	}
}
