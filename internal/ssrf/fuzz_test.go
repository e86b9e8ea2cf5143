package ssrf

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/rivora/rivora/internal/httpurl"
)

// FuzzGuardURL runs destination URLs through the URL check and the guard
// as the control plane does, and holds the guard to its invariants: no
// panic; a refusal names the host; a literal address (after the IDNA
// mapping net/http applies to a host that is not ASCII) is refused at
// create time exactly when the dialer would refuse it; a host that inet_aton
// reads as an IPv4 address is refused unless it is canonical a.b.c.d; and
// allowing everything allows every canonical address.
func FuzzGuardURL(f *testing.F) {
	for _, s := range []string{
		"http://127.0.0.1:9000/hook", "https://example.com/x", "http://[::ffff:10.0.0.5]/", "http://0x7f000001/",
		"http://2130706433/", "http://0177.0.0.1/", "http://127.1/", "http://metadata.google.internal/computeMetadata/v1/",
		"http://[fe80::1%25eth0]:80/", "http://169.254.169.254/latest/meta-data/", "http://[64:ff9b::a9fe:a9fe]/",
		"http://127.0.0.1./", "http://user:pass@10.0.0.5/", "http://[::]/", "http://LOCALHOST/", "http://%30x7f.1/",
		"http://１２７.０.０.１/", "http://127。0。0。1/", "http://１６９．２５４．１６９．２５４/", "http://０ｘ７ｆ.1/", "http://bücher.example/",
	} {
		f.Add(s)
	}
	def := New(nil)
	all := New([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")})
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := httpurl.Parse(raw)
		if err != nil {
			return
		}
		host := u.Hostname()
		err = def.CheckHost(host)
		if err != nil && !strings.HasPrefix(err.Error(), "refused by SSRF guard: "+host+" ") {
			t.Fatalf("CheckHost(%q) = %q: does not name the host", host, err)
		}
		// The host as the agent's HTTP client dials it (IDNA-mapped when
		// not ASCII); one it cannot map is refused.
		ascii, merr := asciiHost(host)
		if merr != nil {
			if err == nil {
				t.Fatalf("CheckHost(%q) allowed a host IDNA cannot map: %v", host, merr)
			}
			return
		}
		checkASCIIURL(t, raw, u, ascii)
		h := strings.ToLower(strings.TrimSuffix(ascii, "."))
		if a, perr := netip.ParseAddr(h); perr == nil {
			dialErr := def.Control("tcp", netip.AddrPortFrom(a, 443).String(), nil)
			if (err == nil) != (dialErr == nil) {
				t.Fatalf("%q: create-time check %v, dial-time check %v: they must agree", host, err, dialErr)
			}
			if aerr := all.CheckHost(host); aerr != nil {
				t.Fatalf("allowing everything, CheckHost(%q) = %v", host, aerr)
			}
			return
		}
		if a, ok := legacyIPv4(h); ok && err == nil {
			t.Fatalf("CheckHost(%q) allowed a host that resolvers read as %s", host, a)
		}
		if numeric(h) && err == nil {
			t.Fatalf("CheckHost(%q) allowed a numeric host", host)
		}
	})
}

// checkASCIIURL holds ASCIIURL to its promise for raw (parsed as u, its
// host mapped to ascii): the same URL but for its host, which is ascii.
func checkASCIIURL(t *testing.T, raw string, u *url.URL, ascii string) {
	t.Helper()
	got, err := ASCIIURL(raw)
	if err != nil {
		t.Fatalf("ASCIIURL(%q): %v, but its host maps to %q", raw, err, ascii)
	}
	v, err := url.Parse(got)
	if err != nil {
		t.Fatalf("ASCIIURL(%q) = %q, which does not parse: %v", raw, got, err)
	}
	if v.Hostname() != ascii || v.Port() != u.Port() || v.Scheme != u.Scheme || v.User.String() != u.User.String() ||
		v.EscapedPath() != u.EscapedPath() || v.RawQuery != u.RawQuery || v.EscapedFragment() != u.EscapedFragment() {
		t.Fatalf("ASCIIURL(%q) = %q: want only the host changed, to %q", raw, got, ascii)
	}
}
