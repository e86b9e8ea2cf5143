package e2e

import (
	"strings"
	"testing"
	"time"
)

// allowLoopback opens loopback to an agent's or a control plane's SSRF
// guard, which refuses it by default: the e2e partners listen on
// 127.0.0.1. (rivora dev allows loopback by default.)
func allowLoopback() []string { return []string{"--allow-destination-cidr", "127.0.0.0/8"} }

// TestSSRFGuardRefusesMetadata: `rivora dev` as started for the tour
// refuses a destination on the cloud metadata address, in its IPv4 and
// IPv6 forms and by name, and a private address, saying which rule and
// which flag; rivoractl exits non-zero with that message.
func TestSSRFGuardRefusesMetadata(t *testing.T) {
	d := startDev(t, devOptions{})
	for url, want := range map[string]string{
		"http://169.254.169.254/latest/meta-data/":         "refused by SSRF guard: 169.254.169.254 is in 169.254.0.0/16 (link-local, where cloud metadata services answer on 169.254.169.254); an operator may allow it with --allow-destination-cidr",
		"http://[::ffff:169.254.169.254]/latest/":          "::ffff:169.254.169.254 is the IPv4-mapped IPv6 form of 169.254.169.254",
		"http://metadata.google.internal/computeMetadata/": "metadata.google.internal is the Google Cloud metadata service (169.254.169.254)",
		"http://10.0.0.5/hook":                             "10.0.0.5 is in 10.0.0.0/8 (private, RFC 1918)",
		"http://0x7f000001:9000/hook":                      "0x7f000001 is 127.0.0.1 written in a form other than a.b.c.d",
	} {
		_, errOut, err := runRivoractl(d, "destinations", "create", "meta", "--url", url)
		if err == nil {
			t.Fatalf("destinations create --url %s exited 0", url)
		}
		if msg := strings.Join(strings.Fields(errOut), " "); !strings.Contains(msg, "invalid request") || !strings.Contains(msg, want) {
			t.Errorf("destinations create --url %s: stderr %q, want it to say %q", url, errOut, want)
		}
	}
	if out := rivoractl(t, d, "destinations", "list"); strings.Contains(out, "meta") {
		t.Fatalf("a refused destination was created: %s", out)
	}
}

// TestSSRFAllowDestinationCIDR: --allow-destination-cidr opens exactly
// the ranges given (replacing rivora dev's loopback default): 10.0.0.0/8
// and 127.0.0.1 are accepted and a partner on 127.0.0.1 gets its event;
// 192.168.0.0/16 and the rest of loopback stay refused.
func TestSSRFAllowDestinationCIDR(t *testing.T) {
	d := startDev(t, devOptions{Args: []string{"--allow-destination-cidr", "10.0.0.0/8,127.0.0.1"}})
	p := newPartner(t)
	rivoractl(t, d, "destinations", "create", "private", "--url", "http://10.1.2.3:8080/hook")
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	if err := p.SetSecret(secret); err != nil {
		t.Fatal(err)
	}
	rivoractl(t, d, "destinations", "create", "local", "--url", p.URL(), "--secret", secret, "--wait")
	for url, want := range map[string]string{
		"http://192.168.1.10/hook": "192.168.0.0/16 (private, RFC 1918)",
		"http://127.0.0.2/hook":    "127.0.0.2 is in 127.0.0.0/8 (loopback)",
	} {
		if _, errOut, err := runRivoractl(d, "destinations", "create", "other", "--url", url); err == nil || !strings.Contains(errOut, want) {
			t.Errorf("destinations create --url %s: exit %v, stderr %q, want a refusal saying %q", url, err, errOut, want)
		}
	}
	out := rivoractl(t, d, "publish", "--destination", "local", "--customer", "acme", "--lane", "l", "--type", "t", "--data", `{}`)
	id := eventIDPattern.FindString(out)
	if id == "" {
		t.Fatalf("publish printed no event id: %q", out)
	}
	p.WaitDelivered(t, []string{id}, 30*time.Second)
}
