package controlplane

import (
	"net/url"

	"github.com/rivora/rivora/internal/ssrf"
)

// guardURL refuses a URL the agents would dial whose host the SSRF guard
// (Config.Guard) denies: a literal address in a denied range, a cloud
// metadata name, a number that is not a canonical a.b.c.d, a name IDNA
// cannot map (an ErrInvalid naming the rule). It resolves nothing: what
// a name resolves to is checked by the agents each time they dial it.
// raw has passed validateURL.
//
// It returns raw as it is to be stored: its host in the IDNA ASCII form
// it is dialled by (ssrf.ASCIIURL), the rest as given. The agents'
// HTTP client does not map a Unicode host itself, and what answers,
// audits and origins show is then what is dialled.
func (cp *ControlPlane) guardURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", errorf(ErrInvalid, "url %q: %w", raw, err)
	}
	if err := cp.cfg.Guard.CheckHost(u.Hostname()); err != nil {
		return "", errorf(ErrInvalid, "url %q %w", raw, err)
	}
	ascii, err := ssrf.ASCIIURL(raw)
	if err != nil {
		return "", errorf(ErrInvalid, "url %q: %w", raw, err)
	}
	return ascii, nil
}
