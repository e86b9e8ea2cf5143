package ssrf_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/rivora/rivora/internal/ssrf"
)

// refusedHosts are hosts the default guard refuses, each with a piece of
// the reason it must give.
var refusedHosts = map[string]string{
	// IPv4 ranges
	"0.0.0.0":          "0.0.0.0/8 (unspecified",
	"0.1.2.3":          "0.0.0.0/8",
	"10.0.0.5":         "10.0.0.5 is in 10.0.0.0/8 (private, RFC 1918); an operator may allow it with --allow-destination-cidr",
	"172.16.0.1":       "172.16.0.0/12 (private, RFC 1918)",
	"172.31.255.255":   "172.16.0.0/12",
	"192.168.1.1":      "192.168.0.0/16 (private, RFC 1918)",
	"100.64.0.1":       "100.64.0.0/10 (shared address space, carrier-grade NAT",
	"192.0.0.192":      "192.0.0.0/24 (IETF protocol assignments",
	"198.19.0.1":       "198.18.0.0/15 (benchmarking",
	"64:ff9b:1::a00:5": "64:ff9b:1::/48 (local-use NAT64",
	"100.100.100.200":  "100.64.0.0/10", // Alibaba Cloud's metadata address
	"127.0.0.1":        "127.0.0.0/8 (loopback)",
	"127.255.0.9":      "127.0.0.0/8 (loopback)",
	"169.254.169.254":  "169.254.169.254 is in 169.254.0.0/16 (link-local",
	"169.254.0.23":     "169.254.0.0/16",
	"224.0.0.1":        "224.0.0.0/4 (multicast)",
	"239.255.255.250":  "224.0.0.0/4 (multicast)",
	"255.255.255.255":  "255.255.255.255/32 (broadcast)",
	"240.0.0.1":        "240.0.0.0/4 (reserved",
	// IPv6 ranges
	"::":             "::/128 (unspecified)",
	"::1":            "::1/128 (loopback)",
	"fe80::1":        "fe80::/10 (link-local)",
	"fe80::1%eth0":   "fe80::/10 (link-local)",
	"febf::1":        "fe80::/10",
	"fc00::1":        "fc00::/7 (unique local",
	"fd00:ec2::254":  "fd00:ec2::254 is in fc00::/7",
	"fec0::1":        "fec0::/10 (site-local",
	"ff02::1":        "ff00::/8 (multicast)",
	"ff05::1:3":      "ff00::/8 (multicast)",
	"::0.0.0.2":      "0.0.0.0/8", // IPv4-compatible of 0.0.0.2
	"::1:2:3:4:5:6":  "",          // a plain public address: must pass (see allowedHosts)
	"::8.8.8.8":      "::/96 (IPv4-compatible IPv6, deprecated",
	"::ffff:8.8.8.8": "",
	// IPv4-mapped, -compatible, -translated, NAT64, 6to4, Teredo forms
	"::ffff:10.0.0.5":          "::ffff:10.0.0.5 is the IPv4-mapped IPv6 form of 10.0.0.5, which is in 10.0.0.0/8 (private, RFC 1918)",
	"::ffff:127.0.0.1":         "IPv4-mapped IPv6 form of 127.0.0.1, which is in 127.0.0.0/8 (loopback)",
	"::ffff:7f00:1":            "IPv4-mapped IPv6 form of 127.0.0.1",
	"::ffff:169.254.169.254":   "IPv4-mapped IPv6 form of 169.254.169.254, which is in 169.254.0.0/16",
	"::ffff:0.0.0.0":           "IPv4-mapped IPv6 form of 0.0.0.0",
	"::ffff:100.64.0.1":        "100.64.0.0/10",
	"::ffff:224.0.0.1":         "224.0.0.0/4",
	"::127.0.0.1":              "IPv4-compatible IPv6 form of 127.0.0.1, which is in 127.0.0.0/8",
	"::10.0.0.5":               "IPv4-compatible IPv6 form of 10.0.0.5",
	"::169.254.169.254":        "IPv4-compatible IPv6 form of 169.254.169.254",
	"::ffff:0:192.168.0.1":     "IPv4-translated IPv6 (RFC 2765) form of 192.168.0.1",
	"64:ff9b::127.0.0.1":       "NAT64 (RFC 6052) form of 127.0.0.1",
	"64:ff9b::a9fe:a9fe":       "NAT64 (RFC 6052) form of 169.254.169.254",
	"2002:a00:5::1":            "6to4 (RFC 3056) form of 10.0.0.5",
	"2002:7f00:1::":            "6to4 (RFC 3056) form of 127.0.0.1",
	"2001:0:1:2::f5ff:fffa":    "Teredo (RFC 4380) form of 10.0.0.5",
	"0000::ffff:192.168.001.1": "ends in a number", // not an address (leading zeros)
	// metadata and loopback names
	"metadata.google.internal":   "metadata.google.internal is the Google Cloud metadata service (169.254.169.254); an operator may allow it with --allow-destination-cidr",
	"METADATA.Google.Internal.":  "the Google Cloud metadata service",
	"metadata.goog":              "the Google Cloud metadata service",
	"metadata":                   "the Google Cloud metadata service's short name",
	"instance-data":              "the AWS EC2 instance metadata service",
	"instance-data.ec2.internal": "the AWS EC2 instance metadata service",
	"metadata.tencentyun.com":    "the Tencent Cloud metadata service (169.254.0.23)",
	"localhost":                  "localhost is a loopback name, RFC 6761 (127.0.0.1)",
	"api.localhost":              "a loopback name",
	// odd IPv4 literals: refused whatever they mean
	"0x7f000001":         "0x7f000001 is 127.0.0.1 written in a form other than a.b.c.d",
	"0X7F000001":         "is 127.0.0.1 written",
	"2130706433":         "2130706433 is 127.0.0.1 written",
	"0177.0.0.1":         "0177.0.0.1 is 127.0.0.1 written",
	"127.1":              "127.1 is 127.0.0.1 written",
	"127.0.1":            "is 127.0.0.1 written",
	"0x7f.1":             "is 127.0.0.1 written",
	"0xa9.254.0251.0xfe": "is 169.254.169.254 written",
	"3232235777":         "is 192.168.1.1 written",
	"134744072":          "is 8.8.8.8 written", // even a public one: write it as a.b.c.d
	"010.0.0.5":          "is 8.0.0.5 written",
	"1.2.3.4.5":          "ends in a number but is not an IPv4 address a.b.c.d",
	"99999999999":        "ends in a number but is not an IPv4 address",
	"09.0.0.1":           "ends in a number",
	"example.123":        "ends in a number",
	"0x":                 "is 0.0.0.0 written",
	"127.0.0.1.":         "127.0.0.0/8 (loopback)", // a trailing dot is the same address
	"1.2.3.4.":           "",
	// Forms IDNA maps to an address (as net/http does before dialling):
	// fullwidth digits and dots, ideographic full stops (issue 22).
	"１２７.０.０.１":                "(read as 127.0.0.1) is in 127.0.0.0/8 (loopback)",
	"127。0。0。1":                "(read as 127.0.0.1) is in 127.0.0.0/8 (loopback)",
	"１６９．２５４．１６９．２５４":          "(read as 169.254.169.254)",
	"１０。０。０。５":                 "(read as 10.0.0.5) is in 10.0.0.0/8",
	"０ｘ７ｆ０００００１":               "(read as 0x7f000001) is 127.0.0.1 written",
	"ＬＯＣＡＬＨＯＳＴ":                "(read as localhost)",
	"ｍｅｔａｄａｔａ.google.internal": "(read as metadata.google.internal)",
	"a\u200db.example":         "IDNA",
}

// allowedHosts pass the default guard.
var allowedHosts = []string{
	"8.8.8.8", "1.1.1.1", "93.184.215.14", "172.15.255.255", "172.32.0.0", "100.63.255.255", "100.128.0.0",
	"169.253.255.255", "223.255.255.255", "11.0.0.1", "192.169.0.1",
	"2606:4700:4700::1111", "2001:4860:4860::8888", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
	"::1:2:3:4:5:6", "fbff::1", "fe7f::1",
	"example.com", "hooks.example.com", "metadata.example.com", "localhost.example.com", "instance-data.example",
	"my-0x7f000001-host.com", "1password.com", "123.example", "0x7f000001.example", "xn--nxasmq6b.com", "1.2.3.4.",
	"bücher.example", "ｅｘａｍｐｌｅ.com", "８.８.８.８",
}

func TestDefaultGuardRefuses(t *testing.T) {
	for _, g := range []*ssrf.Guard{nil, ssrf.New(nil)} {
		for host, want := range refusedHosts {
			if want == "" {
				continue
			}
			err := g.CheckHost(host)
			if err == nil || ssrf.Refusal(err) == nil {
				t.Errorf("CheckHost(%q) = %v, want a refusal", host, err)
				continue
			}
			if !strings.HasPrefix(err.Error(), "refused by SSRF guard: "+host+" ") || !strings.Contains(err.Error(), want) {
				t.Errorf("CheckHost(%q) = %q, want it to start with the host and say %q", host, err, want)
			}
		}
	}
}

func TestDefaultGuardAllows(t *testing.T) {
	g := ssrf.New(nil)
	for _, host := range allowedHosts {
		if err := g.CheckHost(host); err != nil {
			t.Errorf("CheckHost(%q) = %v, want allowed", host, err)
		}
	}
}

// TestAllowedOverride: an allowed CIDR lifts the refusals of what it
// covers, in every form (mapped, NAT64, the metadata names standing for
// it), and nothing else; non-canonical IPv4 forms stay refused.
func TestAllowedOverride(t *testing.T) {
	allowed, err := ssrf.ParseAllowed([]string{"10.0.0.0/8", "169.254.169.254", " fd00::/8 ", ""})
	if err != nil {
		t.Fatal(err)
	}
	g := ssrf.New(allowed)
	for _, host := range []string{"10.0.0.5", "10.255.255.255", "::ffff:10.0.0.5", "::10.0.0.5", "64:ff9b::a00:5", "2002:a00:5::1",
		"169.254.169.254", "::ffff:169.254.169.254", "metadata.google.internal", "instance-data", "fd00:ec2::254", "fd12::1"} {
		if err := g.CheckHost(host); err != nil {
			t.Errorf("with %s: CheckHost(%q) = %v, want allowed", g, host, err)
		}
	}
	for _, host := range []string{"172.16.0.1", "169.254.169.253", "metadata.tencentyun.com", "127.0.0.1", "localhost", "fc00::1", "0x0a000005", "167772165", "10.5"} {
		if err := g.CheckHost(host); ssrf.Refusal(err) == nil {
			t.Errorf("with %s: CheckHost(%q) = %v, want refused", g, host, err)
		}
	}
	loop := ssrf.New(ssrf.Loopback)
	for _, host := range []string{"127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1", "localhost", "a.localhost"} {
		if err := loop.CheckHost(host); err != nil {
			t.Errorf("loopback guard: CheckHost(%q) = %v, want allowed", host, err)
		}
	}
	if err := loop.CheckHost("10.0.0.1"); ssrf.Refusal(err) == nil {
		t.Errorf("loopback guard: 10.0.0.1 = %v, want refused", err)
	}
}

func TestParseAllowed(t *testing.T) {
	got, err := ssrf.ParseAllowed([]string{"10.1.2.3/8", "::1", "192.168.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[10.0.0.0/8 ::1/128 192.168.0.0/16]" {
		t.Errorf("ParseAllowed = %v, want [10.0.0.0/8 ::1/128 192.168.0.0/16]", got)
	}
	for _, bad := range []string{"10.0.0.0/33", "10.0.0", "example.com", "fe80::1%eth0", "10.0.0.0/8/8", "0x0a000000/8"} {
		_, err := ssrf.ParseAllowed([]string{bad})
		if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "10.0.0.0/8") {
			t.Errorf("ParseAllowed(%q) = %v, want an error naming it and showing a CIDR", bad, err)
		}
	}
}

// TestControl: the dialer hook sees "ip:port" and decides as CheckAddr.
func TestControl(t *testing.T) {
	g := ssrf.New(ssrf.Loopback)
	for addr, ok := range map[string]bool{
		"127.0.0.1:80": true, "[::1]:443": true, "8.8.8.8:443": true, "[2606:4700::1]:443": true,
		"10.0.0.5:80": false, "[fe80::1%eth0]:80": false, "[::ffff:169.254.169.254]:80": false, "169.254.169.254:80": false,
		"not-an-address:80": false, "": false,
	} {
		err := g.Control("tcp", addr, nil)
		if (err == nil) != ok {
			t.Errorf("Control(%q) = %v, want ok=%v", addr, err, ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "refused by SSRF guard: ") {
			t.Errorf("Control(%q) = %q, want a guard refusal", addr, err)
		}
	}
	// It is a net.Dialer Control func.
	_ = net.Dialer{Control: g.Control}
}

// TestASCIIURL: a URL's host is put in the IDNA form it is dialled by,
// and nothing else in the URL changes; an ASCII host leaves the URL as
// it is (case too); a host IDNA cannot map is an error naming it.
func TestASCIIURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://ｐａｒｔｎｅｒ.example/x":                       "https://partner.example/x",
		"https://ｐａｒｔｎｅｒ.example:8443/in/ü?key=Ü&a=%2F#f": "https://partner.example:8443/in/ü?key=Ü&a=%2F#f",
		"http://bücher.example":                           "http://xn--bcher-kva.example",
		"HTTP://Bücher.Example?q=1":                       "HTTP://xn--bcher-kva.example?q=1",
		"http://u:p@bücher.example:80#x":                  "http://u:p@xn--bcher-kva.example:80#x",
		"http://b%C3%BCcher.example/p":                    "http://xn--bcher-kva.example/p",
		"https://Partner.Example:8443/X?Q=1":              "https://Partner.Example:8443/X?Q=1",
		"http://127.0.0.1:9000/hook":                      "http://127.0.0.1:9000/hook",
		"http://[::1]:9000/hook":                          "http://[::1]:9000/hook",
		"http://１２７.０.０.１:9000/":                          "http://127.0.0.1:9000/",
	} {
		got, err := ssrf.ASCIIURL(raw)
		if err != nil || got != want {
			t.Errorf("ASCIIURL(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{"http://a\u200d.example/", "http://xn--ü.example/", "https://-ｘ-.example/"} {
		got, err := ssrf.ASCIIURL(raw)
		if err == nil || !strings.Contains(err.Error(), "is not a name an HTTP client can look up (IDNA") {
			t.Errorf("ASCIIURL(%q) = %q, %v; want an error naming the host IDNA refuses", raw, got, err)
		}
	}
}
