package controlplane

import (
	"net/url"
)

// guardURL refuses a destination URL whose host the SSRF guard
// (Config.Guard) denies: a literal address in a denied range, a cloud
// metadata name, a number that is not a canonical a.b.c.d (an
// ErrInvalid naming the rule). It resolves nothing: what a name resolves
// to is checked by the agents each time they dial it. raw has passed
// validateURL.
func (cp *ControlPlane) guardURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errorf(ErrInvalid, "url %q: %w", raw, err)
	}
	if err := cp.cfg.Guard.CheckHost(u.Hostname()); err != nil {
		return errorf(ErrInvalid, "url %q %w", raw, err)
	}
	return nil
}
