package controlplane

import (
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/rivora/rivora/internal/ssrf"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// An origin is where a destination's deliveries land: its URL's scheme,
// host and port. A shared destination (one no customer owns) is the
// operators' for its origin: its path, headers and rate limit protect
// the partner behind it. So a customer token may not make an own
// destination on that origin (which would let it set the paths and
// headers sharedRouting refuses it there, and multiply the partner's
// rate limit by its own destinations), nor send its own destination's
// OAuth2 token requests there (with its own credentials and path), and a
// customer token is shown of a shared destination's URL only its origin
// (its path or query may hold the operators' credentials).

// defaultPorts are the ports of URLs that name none.
var defaultPorts = map[string]string{"http": "80", "https": "443"}

// origin is a URL's scheme, host and port, normalised so that two URLs
// dialling the same host and port compare equal: the scheme and host in
// lower case, the host without a trailing dot, an IP address in its
// canonical form (an IPv4-mapped IPv6 address as IPv4), the port as a
// number, the scheme's default port when none. It resolves nothing: a
// name and an address it resolves to are different origins.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	host := u.Hostname()
	// As it is dialled: a fullwidth or Unicode name is its IDNA form
	// (ｐａｒｔｎｅｒ.example is partner.example). One IDNA refuses is
	// kept as written (the SSRF guard refuses to dial it).
	if ascii, err := ssrf.ASCIIHost(host); err == nil {
		host = ascii
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	}
	port := u.Port()
	if n, err := strconv.Atoi(port); err == nil {
		port = strconv.Itoa(n)
	}
	if port == "" {
		port = defaultPorts[scheme]
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// originOf is raw's origin ("" when raw is not a URL: stored URLs passed
// validateURL).
func originOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return origin(u)
}

// shownOrigin is a URL as a customer token may see a shared
// destination's: scheme://host[:port], as written, without the path,
// query or fragment.
func shownOrigin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
}

// customerOrigin refuses a customer token's own destination at rawURL
// when a shared destination in tx serves that origin. The refusal names
// neither the shared destination nor its URL: a customer token may not
// see them.
func customerOrigin(tx *DestinationTx, rawURL string, sc scope) error {
	if !sc.limited() || !sharedOrigin(tx, rawURL) {
		return nil
	}
	return errorf(ErrDenied, "url %q: its origin %s is served by a destination your operators manage, and a customer's own destination may not share it (that partner's paths, headers and rate limit are the operators' to set): subscribe to the operators' destination for that partner instead, or ask an operator", rawURL, shownOrigin(rawURL))
}

// customerTokenOrigin refuses a customer token's OAuth2 token URL
// (tokenURL; "" when none) on a shared destination's origin: Rivora
// POSTs client-credentials requests there with the customer's chosen
// credentials, scopes and path, which would reach the operators' partner
// as the customer's own destination would (customerOrigin). The refusal
// names neither the shared destination nor its URL.
func customerTokenOrigin(tx *DestinationTx, tokenURL string, sc scope) error {
	if tokenURL == "" || !sc.limited() || !sharedOrigin(tx, tokenURL) {
		return nil
	}
	return errorf(ErrDenied, "oauth2 token url %q: its origin %s is served by a destination your operators manage, and a customer's own destination may not send its token requests there (that partner's paths, headers and rate limit are the operators' to set): use your own token endpoint, or ask an operator", tokenURL, shownOrigin(tokenURL))
}

// sharedOrigin says whether a shared destination in tx serves rawURL's
// origin.
func sharedOrigin(tx *DestinationTx, rawURL string) bool {
	o := originOf(rawURL)
	shared := false
	tx.Each(func(d *rivorav1.Destination) {
		if d.GetOwnerCustomer() == "" && originOf(d.GetUrl()) == o {
			shared = true
		}
	})
	return shared
}

// ownedAtOrigin lists the customer-owned destinations in tx on rawURL's
// origin, or with their OAuth2 token URL there, but except, sorted: the
// operators are told of them when they make a shared destination there
// (a customer's own destination there sets its own paths, headers and
// rate limit at that partner).
func ownedAtOrigin(tx *DestinationTx, rawURL, except string) []string {
	o := originOf(rawURL)
	var ids []string
	tx.Each(func(d *rivorav1.Destination) {
		if d.GetOwnerCustomer() != "" && d.GetId() != except && slices.Contains(customerOrigins(d), o) {
			ids = append(ids, d.GetId())
		}
	})
	slices.Sort(ids)
	return ids
}

// customerOrigins are the origins Rivora calls for destination d: its
// URL's, and its OAuth2 token URL's when another.
func customerOrigins(d *rivorav1.Destination) []string {
	origins := []string{originOf(d.GetUrl())}
	if t := originOf(d.GetOauth2().GetTokenUrl()); t != "" && t != origins[0] {
		origins = append(origins, t)
	}
	return origins
}

// sharesOrigin is the audit detail's note of the customers' own
// destinations (owned) on a shared destination's origin.
func sharesOrigin(owned []string) string {
	if len(owned) == 0 {
		return ""
	}
	return "; warning: its origin is also that of customers' own destinations (or of their OAuth2 token URLs) " + strings.Join(owned, ", ")
}

// warnSharedOrigin logs that shared destination d was made on the origin
// of customers' own destinations (owned): they were there first, so it
// is not refused, but they set their own paths, headers and rate limit
// at the partner d's limits are meant to protect.
func (cp *ControlPlane) warnSharedOrigin(d *rivorav1.Destination, owned []string) {
	if len(owned) == 0 {
		return
	}
	cp.log.Warn("shared destination on the origin of customers' own destinations (or of their OAuth2 token URLs): they reach its partner with their own paths, headers and rate limits; delete them or move this destination if that partner must be reached only through it", "destination", d.GetId(), "origin", shownOrigin(d.GetUrl()), "owned_destinations", owned)
}

// warnSharedOrigins logs, at start or on becoming the leader, each shared
// destination with customers' own destinations on its origin (dests, the
// store's): made before customers were refused that (customerOrigin), or
// before the shared one (warnSharedOrigin told of those then), they reach
// its partner with their own paths, headers and rate limits.
func (cp *ControlPlane) warnSharedOrigins(dests []*rivorav1.Destination) {
	owned := map[string][]string{} // origin → customer-owned destinations
	for _, d := range dests {
		if d.GetOwnerCustomer() != "" {
			for _, o := range customerOrigins(d) {
				owned[o] = append(owned[o], d.GetId())
			}
		}
	}
	for _, d := range dests {
		if d.GetOwnerCustomer() == "" {
			ids := owned[originOf(d.GetUrl())]
			slices.Sort(ids)
			cp.warnSharedOrigin(d, ids)
		}
	}
}
