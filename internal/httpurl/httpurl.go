// Package httpurl is the one check of the http(s) addresses Rivora is given:
// destination URLs, control planes, Consul, the server rivoractl talks to.
// Callers wrap its error with the flag or field it came from.
package httpurl

import (
	"errors"
	"net/url"
)

// ErrNotHTTP is what Parse and ParseBase return for anything else.
var ErrNotHTTP = errors.New("not an absolute http:// or https:// URL with a host")

// ErrNotBase means the URL carries a path or query where only a base
// (scheme and host) belongs.
var ErrNotBase = errors.New("want only scheme, host and port (no path or query)")

// Parse accepts an absolute http:// or https:// URL with a host.
func Parse(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, ErrNotHTTP
	}
	return u, nil
}

// ParseBase accepts http://HOST[:PORT] and https://HOST[:PORT] (a trailing
// "/" allowed): the address of a server, not of a resource on it.
func ParseBase(raw string) (*url.URL, error) {
	u, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, ErrNotBase
	}
	return u, nil
}
