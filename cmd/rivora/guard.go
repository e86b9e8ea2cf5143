package main

import (
	"fmt"
	"net/netip"

	"github.com/urfave/cli/v2"

	"github.com/rivora/rivora/agent/delivery"
	"github.com/rivora/rivora/internal/ssrf"
)

// guardUsage explains --allow-destination-cidr; `rivora dev` adds its
// default.
const guardUsage = "`CIDR`s (comma-separated or repeated; a single address such as 10.0.0.5 too) that destinations may be sent to " +
	"although the SSRF guard refuses them by default: loopback, private (RFC 1918), carrier-grade NAT 100.64.0.0/10, " +
	"link-local 169.254.0.0/16 and fe80::/10 (the cloud metadata address 169.254.169.254), unique-local fc00::/7, multicast, " +
	"unspecified, broadcast and reserved addresses, the IPv6 forms carrying one of those IPv4 addresses, and cloud metadata names " +
	"such as metadata.google.internal. The agents check the address of every connection they open (after DNS, so a name that " +
	"resolves inside the network is refused too); the control plane checks destination URLs and --operator-webhook when they are " +
	"set: give both the same list"

// allowDestinationFlag is --allow-destination-cidr. `rivora dev` allows
// loopback unless told otherwise, so that a tour with a receiver on this
// machine works; an agent or a control plane allows nothing by default.
func allowDestinationFlag(dev bool) cli.Flag {
	f := &cli.StringSliceFlag{Name: "allow-destination-cidr", EnvVars: []string{"RIVORA_ALLOW_DESTINATION_CIDR"}, Usage: guardUsage + " (default: none)"}
	if dev {
		f.Value = cli.NewStringSlice(prefixStrings(ssrf.Loopback)...)
		f.Usage = guardUsage + ". rivora dev allows loopback only by default (127.0.0.0/8, ::1/128), so a receiver on this machine works; " +
			"setting the flag replaces that default (list 127.0.0.0/8 again to keep it)"
	}
	return f
}

// destinationGuard is the SSRF guard --allow-destination-cidr asks for
// (a usage error for a value that is not a CIDR).
func destinationGuard(c *cli.Context) (*ssrf.Guard, error) {
	allowed, err := ssrf.ParseAllowed(c.StringSlice("allow-destination-cidr"))
	if err != nil {
		return nil, cli.Exit(fmt.Sprintf("--allow-destination-cidr: %v", err), 2)
	}
	return ssrf.New(allowed), nil
}

func prefixStrings(ps []netip.Prefix) []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return s
}

// The egress proxy flags (agent and dev): deliveries and OAuth2 token
// fetches leave through an HTTP CONNECT proxy, so partners see known
// source addresses; the SSRF guard still judges each destination's own
// resolved address before the CONNECT.
var (
	egressProxyFlag = &cli.StringFlag{Name: "egress-proxy", EnvVars: []string{"RIVORA_EGRESS_PROXY"},
		Usage: "send deliveries (and OAuth2 token requests) through the HTTP CONNECT proxy at `URL` (http://[user:password@]HOST:PORT), so partners see its static addresses. " +
			"The agent resolves each destination itself, the SSRF guard (--allow-destination-cidr) judges that address, and the proxy is asked to CONNECT to the address, never the name (see docs/security.md). Default: direct"}
	egressNoProxyFlag = &cli.StringSliceFlag{Name: "egress-no-proxy", EnvVars: []string{"RIVORA_EGRESS_NO_PROXY"},
		Usage: "destinations to reach directly despite --egress-proxy: host `NAMES` (covering their subdomains), addresses and CIDRs, comma-separated or repeated"}
)

// egressProxy is the proxy --egress-proxy asks for (nil: none).
func egressProxy(c *cli.Context) (*delivery.EgressProxy, error) {
	if c.String("egress-proxy") == "" {
		if c.IsSet("egress-no-proxy") {
			return nil, cli.Exit("--egress-no-proxy needs --egress-proxy: without a proxy every destination is reached directly", 2)
		}
		return nil, nil
	}
	p, err := delivery.ParseEgressProxy(c.String("egress-proxy"), c.StringSlice("egress-no-proxy"))
	if err != nil {
		return nil, cli.Exit(err.Error(), 2)
	}
	return p, nil
}
