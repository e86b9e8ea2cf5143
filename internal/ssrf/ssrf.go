// Package ssrf is Rivora's guard against server-side request forgery: the
// one decision whether an address or a host name may be sent a webhook
// (destinations and the operator webhook alike). It holds the allowed
// CIDRs (--allow-destination-cidr) and the rules of what is denied without
// them: the addresses that reach into the network Rivora runs in rather
// than out to a partner — loopback, private (RFC 1918), shared (CGNAT),
// link-local (where cloud metadata services answer), unique-local,
// multicast, unspecified, broadcast and reserved ranges, and the IPv6
// forms that carry one of those IPv4 addresses (IPv4-mapped,
// IPv4-compatible, NAT64, 6to4, Teredo) — plus the cloud metadata host
// names, and host names written as IPv4 numbers in a form other than
// a.b.c.d (0x7f000001, 2130706433, 0177.0.0.1, 127.1), which libc-style
// resolvers and browsers take for addresses. A host that is not ASCII is
// judged by its IDNA mapping, the name net/http dials
// ("１２７.０.０.１" is 127.0.0.1).
//
// It is enforced twice. The control plane checks a destination's URL when
// it is created or updated (CheckHost: literal addresses and names, no
// DNS), so that a mistake is refused with its reason at once; the agent's
// delivery dialer checks the resolved address of every connection it
// opens (Control), which is what no DNS answer, rebinding or redirect gets
// around.
//
// A nil *Guard denies by default and allows nothing more.
package ssrf

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Flag is the flag that opens ranges, as error messages name it.
const Flag = "--allow-destination-cidr"

// Loopback is what `rivora dev` allows by default, so that a tour with a
// receiver on 127.0.0.1 works.
var Loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// Guard decides whether an address may be dialled. It is immutable and
// safe for concurrent use.
type Guard struct {
	allowed []netip.Prefix
}

// New returns a guard that denies by default and allows the addresses in
// allowed, which override every denial.
func New(allowed []netip.Prefix) *Guard {
	g := &Guard{}
	for _, p := range allowed {
		g.allowed = append(g.allowed, p.Masked())
	}
	return g
}

// ParseAllowed reads the values of --allow-destination-cidr: CIDRs
// (10.0.0.0/8, fd00::/8) or single addresses (10.0.0.5). Empty values are
// skipped.
func ParseAllowed(values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if p, err := netip.ParsePrefix(v); err == nil {
			out = append(out, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(v); err == nil && a.Zone() == "" {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		return nil, fmt.Errorf("%q is not a CIDR: want one such as 10.0.0.0/8 or fd00::/8, or a single address such as 10.0.0.5", v)
	}
	return out, nil
}

// String describes the guard for logs and help.
func (g *Guard) String() string {
	if g == nil || len(g.allowed) == 0 {
		return "default denials, nothing allowed"
	}
	s := make([]string, len(g.allowed))
	for i, p := range g.allowed {
		s[i] = p.String()
	}
	return "default denials, allowing " + strings.Join(s, ", ")
}

// RefusedError is a refusal: Host (an address or a host name, as given)
// and why. Its text starts "refused by SSRF guard: " followed by the host.
type RefusedError struct {
	Host string
	// Why says which rule refused it, e.g. "is in 10.0.0.0/8 (private,
	// RFC 1918)".
	Why string
	// Allowable tells a refusal that an allowed CIDR would lift.
	Allowable bool
}

func (e *RefusedError) Error() string {
	s := "refused by SSRF guard: " + e.Host + " " + e.Why
	if e.Allowable {
		s += "; an operator may allow it with " + Flag
	}
	return s
}

// Refusal is the guard's refusal inside err (a dial's error, say), nil
// if err is not one.
func Refusal(err error) *RefusedError {
	var r *RefusedError
	if errors.As(err, &r) {
		return r
	}
	return nil
}

// CheckAddr refuses an address the guard denies (a *RefusedError), unless
// an allowed CIDR covers it.
func (g *Guard) CheckAddr(a netip.Addr) error { return g.check(a, a.String()) }

// check is CheckAddr naming the address as shown.
func (g *Guard) check(a netip.Addr, shown string) error {
	a = a.WithZone("")
	if !a.IsValid() {
		return &RefusedError{Host: shown, Why: "is not an IP address"}
	}
	if g.allows(a) {
		return nil
	}
	if v4, form, ok := embedded(a); ok {
		if g.allows(v4) {
			return nil
		}
		if r, ok := deniedBy(v4); ok {
			return &RefusedError{Host: shown, Why: fmt.Sprintf("is the %s form of %s, which %s", form, v4, r.why()), Allowable: true}
		}
	}
	if r, ok := deniedBy(a); ok {
		return &RefusedError{Host: shown, Why: r.why(), Allowable: true}
	}
	return nil
}

// CheckHost checks the host of a URL (url.URL.Hostname: no brackets, no
// port) without resolving it: a literal address is checked as one; a
// cloud metadata name, or localhost, as the address it stands for; a name
// that is a number but not a canonical a.b.c.d is refused outright (write
// the address as a.b.c.d). Other names pass: what they resolve to is
// checked when the agent dials.
//
// A host that is not ASCII is checked as the HTTP client will dial it:
// mapped by IDNA (UTS #46, the lookup profile net/http uses), so that
// "１２７.０.０.１" and "127。0。0。1" are refused as 127.0.0.1 is.
func (g *Guard) CheckHost(host string) error {
	ascii, err := asciiHost(host)
	if err != nil {
		return &RefusedError{Host: host, Why: fmt.Sprintf("is not a host name an HTTP client can look up (IDNA: %v)", err)}
	}
	err = g.checkASCIIHost(host, ascii)
	if r := Refusal(err); r != nil && ascii != host {
		r.Why = fmt.Sprintf("(read as %s) %s", ascii, r.Why)
	}
	return err
}

// ASCIIHost is host as it is dialled: a name with non-ASCII letters
// (fullwidth, Unicode) in its IDNA ASCII form, as net/http maps it.
func ASCIIHost(host string) (string, error) { return asciiHost(host) }

// ASCIIURL is raw, an absolute URL with a host, with that host as it is
// dialled (ASCIIHost): "https://ｐａｒｔｎｅｒ.example:8443/x?q=ü" is
// "https://partner.example:8443/x?q=ü". Everything but the host (scheme,
// userinfo, port, path, query, fragment) is kept byte for byte, and an
// ASCII host leaves raw as it is. Not every HTTP client maps a host
// (fasthttp, which delivers webhooks, sends and dials it as written), so
// what is stored and dialled is this form. An error is a host IDNA
// cannot map, or raw not a URL. A raw of ASCII without escapes needs no
// mapping and is returned as it is, unparsed (it is on every delivery's
// path).
func ASCIIURL(raw string) (string, error) {
	if !strings.ContainsFunc(raw, func(r rune) bool { return r >= utf8.RuneSelf || r == '%' }) {
		return raw, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	host := u.Hostname()
	ascii, err := asciiHost(host)
	if err != nil {
		return "", fmt.Errorf("host %q is not a name an HTTP client can look up (IDNA: %w)", host, err)
	}
	if ascii == host {
		return raw, nil
	}
	// The authority is what url.Parse reads it as: from "//" after the
	// scheme to the first "/", "?" or "#".
	i := strings.Index(raw, "://")
	if i < 0 {
		return "", fmt.Errorf("%q has no authority (scheme://host)", raw)
	}
	start := i + len("://")
	end := len(raw)
	if j := strings.IndexAny(raw[start:], "/?#"); j >= 0 {
		end = start + j
	}
	authority := raw[start:end]
	userinfo := ""
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo = authority[:at+1]
	}
	if strings.Contains(ascii, ":") {
		ascii = "[" + ascii + "]"
	}
	if port := u.Port(); port != "" {
		ascii += ":" + port
	}
	return raw[:start] + userinfo + ascii + raw[end:], nil
}

// asciiHost maps host as net/http does before it dials: unchanged when
// ASCII, else by IDNA's lookup profile.
func asciiHost(host string) (string, error) {
	for i := 0; i < len(host); i++ {
		if host[i] >= utf8.RuneSelf {
			return idna.Lookup.ToASCII(host)
		}
	}
	return host, nil
}

// checkASCIIHost is CheckHost for host's ASCII form, h; refusals name
// host as given.
func (g *Guard) checkASCIIHost(host, h string) error {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if a, err := netip.ParseAddr(h); err == nil {
		return g.check(a, host)
	}
	if numeric(h) {
		why := "ends in a number but is not an IPv4 address a.b.c.d"
		if a, ok := legacyIPv4(h); ok {
			why = fmt.Sprintf("is %s written in a form other than a.b.c.d (hexadecimal, octal, decimal or shortened), which resolvers read differently", a)
		}
		return &RefusedError{Host: host, Why: why + "; write the address as a.b.c.d"}
	}
	if n, ok := metadataName(h); ok {
		if err := g.CheckAddr(n.addr); err != nil {
			return &RefusedError{Host: host, Why: fmt.Sprintf("is %s (%s)", n.what, n.addr), Allowable: true}
		}
	}
	return nil
}

// Control is a net.Dialer Control func: it runs on the resolved address
// of every connection the dialer opens (each address Happy Eyeballs
// tries), before it connects, and refuses the denied ones.
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{Host: address, Why: "is not an IP address and port"}
	}
	return g.CheckAddr(ap.Addr())
}

func (g *Guard) allows(a netip.Addr) bool {
	if g == nil {
		return false
	}
	for _, p := range g.allowed {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
