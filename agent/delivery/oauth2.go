package delivery

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/rivora/rivora/agent/destinations"
	"github.com/rivora/rivora/internal/ssrf"
)

// OAuth2 client credentials: one token per destination (per settings),
// fetched when first needed, reused by every attempt until shortly before
// it expires, and fetched again then. An expires_in of 0, absent or
// negative (an expiry already past when received) is taken as no expiry
// given: the token is kept until the partner refuses it (a 401,
// Rejected), not fetched again for every attempt. A positive one is
// honoured (a token is never used past its expiry): a short one costs a
// request per its lifetime, however many attempts go out. A failing
// token endpoint is retried with a growing pause, never once per
// attempt: attempts in the pause fail at once with the endpoint's last
// error, which is the destination's (its lastError, its health), so its
// events are held.

var tokenFetches = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "rivora_oauth2_token_fetches_total",
	Help: "OAuth2 token requests to destinations' token endpoints, by destination and result (ok, error).",
}, []string{"destination", "result"})

const (
	// tokenFetchTimeout bounds one token request.
	tokenFetchTimeout = 10 * time.Second
	// tokenRetryMin and tokenRetryMax bound the pause after a failed
	// token request (doubling from min).
	tokenRetryMin = time.Second
	tokenRetryMax = 30 * time.Second
	// tokenRefreshMax is the most a token is refreshed ahead of its
	// expiry (a fifth of its lifetime when that is less).
	tokenRefreshMax = 5 * time.Minute
	// tokenRejectedSpacing is how old a token must be before a partner's
	// 401 makes the next attempt fetch a new one: a partner that refuses
	// every token does not get a token request per attempt.
	tokenRejectedSpacing = 10 * time.Second
)

// tokens holds a token source per destination.
type tokens struct {
	client *http.Client // for destinations without TLS settings of their own
	dialer *egressDialer
	base   *tls.Config
	now    func() time.Time

	mu      sync.Mutex
	sources map[string]*tokenSource // by destination id
}

// newTokens returns token sources whose requests dial through dialer
// (its SSRF guard) and verify TLS with tlsConfig (nil: the defaults).
func newTokens(dialer *egressDialer, tlsConfig *tls.Config, now func() time.Time) *tokens {
	return &tokens{client: tokenClient(dialer, tlsConfig), dialer: dialer, base: tlsConfig, now: now, sources: map[string]*tokenSource{}}
}

// tokenClient makes token requests through dialer (its SSRF guard) with
// tlsConfig.
func tokenClient(dialer *egressDialer, tlsConfig *tls.Config) *http.Client {
	transport := &http.Transport{
		DialContext: dialer.DialContext, TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true,
		MaxIdleConnsPerHost: 2, IdleConnTimeout: idleTimeout, TLSHandshakeTimeout: tokenFetchTimeout,
	}
	return &http.Client{
		Transport: transport, Timeout: tokenFetchTimeout,
		// A token endpoint's redirect is not followed: the guard decided
		// on the registered address, not on where it points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// source returns the token source of o, a new one when o's settings or
// the destination's TLS settings (c, nil: none) changed. A destination
// with TLS settings has its own client: its token endpoint gets its
// client certificate and trusts its pinned CA too (ClientTLS.TokenConfig).
func (t *tokens) source(o *destinations.OAuth2, c *destinations.ClientTLS) (*tokenSource, error) {
	key := o.Key
	if c != nil {
		key += "|" + c.Key
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sources[o.DestinationID]
	if s == nil || s.key != key {
		client := t.client
		if c != nil {
			cfg, err := c.TokenConfig(t.base)
			if err != nil {
				return nil, fmt.Errorf("oauth2 token endpoint: %w", err)
			}
			client = tokenClient(t.dialer, cfg)
		}
		s = newTokenSource(o, client, t.now)
		s.key = key
		t.sources[o.DestinationID] = s
	}
	return s, nil
}

// forget drops a destination's token source and its metric series.
func (t *tokens) forget(destination string) {
	t.mu.Lock()
	delete(t.sources, destination)
	t.mu.Unlock()
	tokenFetches.DeletePartialMatch(prometheus.Labels{"destination": destination})
}

// tokenSource caches one destination's token; its mutex is held during a
// fetch, so concurrent attempts wait for one request instead of each
// making one.
type tokenSource struct {
	key  string
	dest string
	// endpoint is the token URL as its errors name it (tokenEndpoint).
	endpoint string
	config   clientcredentials.Config
	client   *http.Client
	now      func() time.Time

	mu sync.Mutex
	// token is the cached token (nil: none); fetchedAt when it came;
	// expiry when it expires (zero: never said), on s.now's clock;
	// refreshAt when the next attempt fetches a new one.
	token     *oauth2.Token
	fetchedAt time.Time
	expiry    time.Time
	refreshAt time.Time
	// failed is the last fetch's error, in force until retryAt; pause is
	// the pause after the next failure.
	failed  error
	retryAt time.Time
	pause   time.Duration
}

func newTokenSource(o *destinations.OAuth2, client *http.Client, now func() time.Time) *tokenSource {
	// The credentials go in HTTP Basic (RFC 6749 2.3.1: every server
	// supports it); auto-detection would send each failing request twice.
	cfg := clientcredentials.Config{ClientID: o.ClientID, ClientSecret: o.ClientSecret, TokenURL: o.TokenURL, Scopes: o.Scopes, AuthStyle: oauth2.AuthStyleInHeader}
	if o.Audience != "" {
		cfg.EndpointParams = url.Values{"audience": {o.Audience}}
	}
	return &tokenSource{key: o.Key, dest: o.DestinationID, endpoint: tokenEndpoint(o), config: cfg, client: client, now: now, pause: tokenRetryMin}
}

// Token is the access token for an attempt: the cached one, or a new one
// when it is due for refresh. While a failed fetch's pause lasts it is
// that failure (or the cached token, if it has not expired yet).
func (s *tokenSource) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.token != nil && now.Before(s.refreshAt) {
		return s.token.AccessToken, nil
	}
	if s.failed != nil && now.Before(s.retryAt) {
		return s.stillValid(now, s.failed)
	}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, oauth2.HTTPClient, s.client), tokenFetchTimeout)
	defer cancel()
	tok, err := s.config.Token(ctx)
	now = s.now()
	if err != nil {
		tokenFetches.WithLabelValues(s.dest, "error").Inc()
		s.failed, s.retryAt, s.pause = describeTokenError(err, s.config.TokenURL, s.endpoint), now.Add(s.pause), min(2*s.pause, tokenRetryMax)
		return s.stillValid(now, s.failed)
	}
	tokenFetches.WithLabelValues(s.dest, "ok").Inc()
	s.token, s.fetchedAt, s.expiry = tok, now, time.Time{}
	// The library sets Expiry from expires_in on the wall clock. One
	// already past (a negative expires_in) is taken as none given, as a
	// zero or absent one is: honouring it would fetch a token per attempt.
	if life := time.Until(tok.Expiry); !tok.Expiry.IsZero() && life > 0 {
		s.expiry = now.Add(life)
	}
	s.refreshAt = refreshTime(s.expiry, now)
	s.failed, s.pause = nil, tokenRetryMin
	return tok.AccessToken, nil
}

// stillValid is the cached token while it has not expired, else err.
func (s *tokenSource) stillValid(now time.Time, err error) (string, error) {
	if s.token != nil && (s.expiry.IsZero() || now.Before(s.expiry)) {
		return s.token.AccessToken, nil
	}
	return "", err
}

// Rejected tells the source the partner refused token (a 401): an
// attempt from tokenRejectedSpacing after the token was fetched fetches a
// new one, so a partner that refuses every token does not get a token
// request per attempt. It returns what the attempt's error adds, in
// parentheses.
func (s *tokenSource) Rejected(token string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token == nil || s.token.AccessToken != token {
		return "(the partner refused an OAuth2 access token already replaced)"
	}
	at := s.fetchedAt.Add(tokenRejectedSpacing)
	if now := s.now(); at.Before(now) {
		at = now
	}
	if at.Before(s.refreshAt) {
		s.refreshAt = at
	}
	return fmt.Sprintf("(the partner refused the OAuth2 access token; a new one is fetched for attempts from %s)", at.UTC().Format("15:04:05"))
}

// refreshTime is when a token fetched at now that expires at expiry is
// replaced: ahead of its expiry by a fifth of its lifetime, at most
// tokenRefreshMax; never for a token without expiry.
func refreshTime(expiry, now time.Time) time.Time {
	if expiry.IsZero() {
		return now.Add(100 * 365 * 24 * time.Hour)
	}
	life := expiry.Sub(now)
	return now.Add(life - min(life/5, tokenRefreshMax))
}

// tokenErrorText is s as a token error shows it: printable, at most
// tokenErrorMax bytes of it.
func tokenErrorText(s string) string {
	s = printable(s[:min(len(s), 4*tokenErrorMax)])
	if len(s) > tokenErrorMax {
		s = strings.ToValidUTF8(s[:tokenErrorMax], "") + "…"
	}
	return s
}

// tokenErrorMax bounds each text a token endpoint's refusal carries.
const tokenErrorMax = 200

// tokenEndpoint is o's token URL as a token request's error names it:
// without its query, userinfo or fragment (a query may carry a
// credential), and for a shared destination only its origin
// (scheme://host[:port]), as a customer is shown of a shared
// destination's URL: the path is the operators', and the error is the
// attempt's last error, which customers read.
func tokenEndpoint(o *destinations.OAuth2) string {
	u, err := url.Parse(o.TokenURL)
	if err != nil || u.Host == "" {
		return "the token URL" // checked by the control plane; never shown
	}
	shown := url.URL{Scheme: u.Scheme, Host: u.Host}
	if !o.Shared {
		shown.Path, shown.RawPath = u.Path, u.RawPath
	}
	return shown.String()
}

// describeTokenError says what went wrong with a token request to
// tokenURL, prefixed "oauth2 token endpoint:": the status and the OAuth2
// error code ("401 invalid_client"), the SSRF guard's refusal, or the
// transport error, with the URL named as endpoint (tokenEndpoint). The
// transport's errors name the whole URL (a *url.Error), query and all;
// they are unwrapped, and the URL is cut from any text left.
func describeTokenError(err error, tokenURL, endpoint string) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil {
		// What the endpoint wrote is the destination owner's text, stored
		// with every attempt and shown to operators: bounded, and without
		// control characters (a terminal's escapes), like a partner's body.
		msg := fmt.Sprintf("oauth2 token endpoint: %d", re.Response.StatusCode)
		if code := tokenErrorText(re.ErrorCode); code != "" {
			msg += " " + code
		} else if body := tokenErrorText(string(re.Body)); body != "" {
			msg += ": " + body
		}
		if desc := tokenErrorText(re.ErrorDescription); desc != "" {
			msg += " (" + desc + ")"
		}
		return errors.New(msg)
	}
	if refused := ssrf.Refusal(err); refused != nil {
		return fmt.Errorf("oauth2 token endpoint: %w", refused)
	}
	cause, sent := err, false
	for {
		var ue *url.Error
		if !errors.As(cause, &ue) {
			break
		}
		cause, sent = ue.Err, true
	}
	text := "oauth2 token endpoint: " + withoutURL(cause.Error(), tokenURL, endpoint)
	if sent {
		// The request failed (no answer): which URL is worth saying.
		text = fmt.Sprintf("oauth2 token endpoint: request to %s failed: %s", endpoint, withoutURL(cause.Error(), tokenURL, endpoint))
	}
	return &tokenError{text: text, err: cause}
}

// withoutURL is s with every URL on tokenURL's host (with any userinfo,
// path, query or fragment: the whole URL, as the transport quotes it, or
// as the request saw it) replaced by endpoint, and with the parts of
// tokenURL that may hold a credential (its query, userinfo and fragment)
// replaced by "…" wherever else they are.
func withoutURL(s, tokenURL, endpoint string) string {
	s = strings.ReplaceAll(s, tokenURL, endpoint)
	u, err := url.Parse(tokenURL)
	if err != nil || u.Host == "" {
		return s
	}
	quoted := regexp.MustCompile(`(?i)` + regexp.QuoteMeta(u.Scheme) + `://([^/?#\s"'@]*@)?` + regexp.QuoteMeta(u.Host) + `[^\s"']*`)
	s = quoted.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasSuffix(m, ":") {
			return endpoint + ":" // "read URL: cause" keeps its colon
		}
		return endpoint
	})
	for _, part := range []string{u.RawQuery, u.Query().Encode(), u.User.String(), u.EscapedFragment(), u.Fragment} {
		if part != "" {
			s = strings.ReplaceAll(s, part, "…")
		}
	}
	return s
}

// tokenError is a failed token request said without its URL's secrets;
// its cause (without the *url.Error that named the URL) is kept for
// errors.Is and errors.As.
type tokenError struct {
	text string
	err  error
}

func (e *tokenError) Error() string { return e.text }
func (e *tokenError) Unwrap() error { return e.err }
