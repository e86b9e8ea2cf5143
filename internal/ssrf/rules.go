package ssrf

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// rule is a denied range and what it is.
type rule struct {
	prefix netip.Prefix
	what   string
}

func (r rule) why() string { return fmt.Sprintf("is in %s (%s)", r.prefix, r.what) }

// denied are the ranges refused unless allowed, the more specific first
// (the first match names the refusal).
var denied = []rule{
	{netip.MustParsePrefix("0.0.0.0/8"), `unspecified, "this network" (RFC 1122)`},
	{netip.MustParsePrefix("10.0.0.0/8"), "private, RFC 1918"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space, carrier-grade NAT (RFC 6598)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local, where cloud metadata services answer on 169.254.169.254"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private, RFC 1918"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments (RFC 6890), where Oracle Cloud's metadata service answers on 192.0.0.192"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private, RFC 1918"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (RFC 2544), often used inside networks"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (RFC 1112)"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible IPv6, deprecated (RFC 4291)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64 (RFC 8215), translated to IPv4 addresses inside the site"},
	{netip.MustParsePrefix("fc00::/7"), "unique local (RFC 4193), where AWS's IPv6 metadata service answers on fd00:ec2::254"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fec0::/10"), "site-local, deprecated (RFC 3879)"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

func deniedBy(a netip.Addr) (rule, bool) {
	for _, r := range denied {
		if r.prefix.Contains(a) {
			return r, true
		}
	}
	return rule{}, false
}

var (
	translated = netip.MustParsePrefix("::ffff:0:0:0/96")
	compatible = netip.MustParsePrefix("::/96")
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour  = netip.MustParsePrefix("2002::/16")
	teredo     = netip.MustParsePrefix("2001::/32")
)

// embedded returns the IPv4 address an IPv6 address stands for, and the
// form that carries it: traffic to it reaches that IPv4 address (the
// kernel, a NAT64 gateway or a tunnel relay translates it), so it is
// checked as that address too.
func embedded(a netip.Addr) (netip.Addr, string, bool) {
	if !a.Is6() {
		return netip.Addr{}, "", false
	}
	b := a.As16()
	last := netip.AddrFrom4([4]byte(b[12:16]))
	switch {
	case a.Is4In6():
		return a.Unmap(), "IPv4-mapped IPv6", true
	case translated.Contains(a):
		return last, "IPv4-translated IPv6 (RFC 2765)", true
	case compatible.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return last, "IPv4-compatible IPv6", true
	case nat64.Contains(a):
		return last, "NAT64 (RFC 6052)", true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4 (RFC 3056)", true
	case teredo.Contains(a):
		return netip.AddrFrom4([4]byte{b[12] ^ 0xff, b[13] ^ 0xff, b[14] ^ 0xff, b[15] ^ 0xff}), "Teredo (RFC 4380)", true
	}
	return netip.Addr{}, "", false
}

// numeric reports a host name whose last label is a number (decimal, or
// hexadecimal with 0x): browsers (the WHATWG URL standard) and libc
// resolvers (inet_aton) take such a name for an IPv4 address, whatever Go
// makes of it. No top-level domain is numeric.
func numeric(h string) bool {
	labels := strings.Split(h, ".")
	if len(labels) > 1 && labels[len(labels)-1] == "" {
		labels = labels[:len(labels)-1]
	}
	last := labels[len(labels)-1]
	if hex, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// legacyIPv4 reads h as inet_aton does: one to four parts, each decimal,
// octal (leading 0) or hexadecimal (0x), the last filling the remaining
// bytes (127.1 is 127.0.0.1, 2130706433 is 127.0.0.1).
func legacyIPv4(h string) (netip.Addr, bool) {
	parts := strings.Split(h, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var n uint64
	for i, p := range parts {
		v, ok := legacyPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if v > 255 {
				return netip.Addr{}, false
			}
			n |= v << (8 * (3 - i))
			continue
		}
		if v >= 1<<(8*(4-i)) {
			return netip.Addr{}, false
		}
		n |= v
	}
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

func legacyPart(p string) (uint64, bool) {
	base := 10
	switch {
	case strings.HasPrefix(p, "0x"):
		p, base = p[2:], 16
		if p == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		p, base = p[1:], 8
	}
	v, err := strconv.ParseUint(p, base, 32) // no sign, no underscores
	return v, err == nil
}

// metadataHost is a name that stands for an internal address.
type metadataHost struct {
	addr netip.Addr
	what string
}

// metadataNames are the cloud metadata service names (each provider's
// documented name for its instance metadata endpoint), refused unless
// the address they stand for is allowed. Other internal names are caught
// when the agent dials what they resolve to.
var metadataNames = map[string]metadataHost{
	"metadata.google.internal":   {netip.MustParseAddr("169.254.169.254"), "the Google Cloud metadata service"},
	"metadata.goog":              {netip.MustParseAddr("169.254.169.254"), "the Google Cloud metadata service"},
	"metadata":                   {netip.MustParseAddr("169.254.169.254"), "the Google Cloud metadata service's short name"},
	"instance-data":              {netip.MustParseAddr("169.254.169.254"), "the AWS EC2 instance metadata service"},
	"instance-data.ec2.internal": {netip.MustParseAddr("169.254.169.254"), "the AWS EC2 instance metadata service"},
	"metadata.tencentyun.com":    {netip.MustParseAddr("169.254.0.23"), "the Tencent Cloud metadata service"},
}

// metadataName returns what a (lower-case, no trailing dot) host name
// stands for: a metadata service, or loopback for localhost and
// *.localhost (RFC 6761).
func metadataName(h string) (metadataHost, bool) {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return metadataHost{netip.MustParseAddr("127.0.0.1"), "a loopback name, RFC 6761"}, true
	}
	n, ok := metadataNames[h]
	return n, ok
}
