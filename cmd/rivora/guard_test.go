package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestAllowDestinationCIDRRefused: a value of --allow-destination-cidr
// that is not a CIDR stops every command that takes it with a usage error
// naming it, and an operator webhook the guard refuses stops the control
// plane and rivora dev, naming the rule.
func TestAllowDestinationCIDRRefused(t *testing.T) {
	base := map[string][]string{
		"controlplane": {"--listen", "127.0.0.1:0", "--state-dir", t.TempDir(), "--insecure"},
		"agent":        {"--name", "a1", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--allow-local-archive", "--insecure", "--controlplane", "http://127.0.0.1:1"},
		"dev":          {"--listen", "127.0.0.1:0", "--data-dir", t.TempDir()},
	}
	for _, tc := range []struct {
		cmd     string
		args    []string
		mention []string
	}{
		{"controlplane", []string{"--allow-destination-cidr", "10.0.0.0/33"}, []string{"--allow-destination-cidr", `"10.0.0.0/33" is not a CIDR`}},
		{"agent", []string{"--allow-destination-cidr", "10.0.0.0/8,intranet"}, []string{"--allow-destination-cidr", `"intranet" is not a CIDR`}},
		{"dev", []string{"--allow-destination-cidr", "127.0.0.1/8,::1/129"}, []string{`"::1/129" is not a CIDR`}},
		{"controlplane", []string{"--operator-webhook", "http://169.254.169.254/ops"}, []string{"--operator-webhook", "refused by SSRF guard: 169.254.169.254 is in 169.254.0.0/16", "--allow-destination-cidr"}},
		{"controlplane", []string{"--operator-webhook", "http://127.0.0.1:1/ops"}, []string{"refused by SSRF guard: 127.0.0.1 is in 127.0.0.0/8 (loopback)"}},
		{"dev", []string{"--operator-webhook", "http://10.0.0.5/ops"}, []string{"refused by SSRF guard: 10.0.0.5 is in 10.0.0.0/8 (private, RFC 1918)"}},
		{"dev", []string{"--operator-webhook", "http://metadata.google.internal/"}, []string{"refused by SSRF guard: metadata.google.internal is the Google Cloud metadata service"}},
	} {
		app := newApp()
		app.ExitErrHandler = func(*cli.Context, error) {}
		err := app.Run(append(append([]string{"rivora", tc.cmd}, base[tc.cmd]...), tc.args...))
		var exit cli.ExitCoder
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("rivora %s %v: err %v, want a usage error (exit 2)", tc.cmd, tc.args, err)
			continue
		}
		for _, m := range tc.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("rivora %s %v: %q does not say %q", tc.cmd, tc.args, err, m)
			}
		}
	}
}

// TestDevHelpSaysLoopbackIsAllowed: rivora dev's --help tells that it
// allows loopback destinations only, and how to open more.
func TestDevHelpSaysLoopbackIsAllowed(t *testing.T) {
	for cmd, want := range map[string][]string{
		"dev":          {"--allow-destination-cidr", "allows loopback only by default (127.0.0.0/8, ::1/128)", "169.254.169.254", "RIVORA_ALLOW_DESTINATION_CIDR"},
		"agent":        {"--allow-destination-cidr", "(default: none)", "RIVORA_ALLOW_DESTINATION_CIDR"},
		"controlplane": {"--allow-destination-cidr", "(default: none)"},
	} {
		var out bytes.Buffer
		app := newApp()
		app.Writer = &out
		if err := app.Run([]string{"rivora", cmd, "--help"}); err != nil {
			t.Fatal(err)
		}
		help := strings.Join(strings.Fields(out.String()), " ")
		for _, w := range want {
			if !strings.Contains(help, w) {
				t.Errorf("rivora %s --help does not say %q", cmd, w)
			}
		}
	}
}
