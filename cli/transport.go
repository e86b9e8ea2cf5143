package cli

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"connectrpc.com/connect"
)

// apiOnly is rivoractl's HTTP transport: it refuses an answer that did
// not come from a Connect API, such as the console's page (--server
// http://host:7400/console/) or another server on that port. Connect
// reports those as "unknown: 405 Method Not Allowed" or "invalid
// content-type", which read as Rivora failing; notAPIError says what
// answered instead. What Rivora's own server answers without Connect
// passes: 404 (its mux, for a service this process does not serve: an
// agent asked for AdminService), and 429 and 502–504, which a proxy in
// front of Rivora answers for it and Connect reads as unavailable.
type apiOnly struct{ next http.RoundTripper }

func (t apiOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || connectAnswer(resp) {
		return resp, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // keep the connection
	resp.Body.Close()
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	// Unimplemented: the SDK (publish) does not retry it.
	return nil, connect.NewError(connect.CodeUnimplemented, &notAPIError{status: resp.StatusCode, contentType: mt})
}

// connectAnswer reports whether resp is a Connect (or gRPC) answer, or
// one of the statuses apiOnly leaves to Connect.
func connectAnswer(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		return false
	}
	return mt == "application/proto" || mt == "application/json" ||
		strings.HasPrefix(mt, "application/connect+") || strings.HasPrefix(mt, "application/grpc")
}

// notAPIError is an answer from something other than Rivora's API.
type notAPIError struct {
	status      int
	contentType string // media type; "" when none was sent
}

func (e *notAPIError) Error() string {
	return fmt.Sprintf("not a Connect API: HTTP %d, %s", e.status, e.answered())
}

func (e *notAPIError) answered() string {
	if e.contentType == "" {
		return "no content type"
	}
	return "content type " + e.contentType
}

// describeNotAPI says that the server at server is not Rivora's API and
// what to check: a path in --server (Rivora serves its API at the root
// of its address), or the address itself.
func describeNotAPI(e *notAPIError, server string) string {
	text := fmt.Sprintf("the server at %s does not answer as Rivora's API (HTTP %d, %s)", server, e.status, e.answered())
	if root, path := splitPath(server); path != "" {
		return text + fmt.Sprintf(": Rivora serves its API at the root of its address, not under %s: use --server %s (or RIVORA_SERVER)", path, root)
	}
	return text + ": is --server (or RIVORA_SERVER) the address of `rivora dev`, of the control plane or of an agent?"
}

// splitPath splits a server URL into its origin and its path ("" for
// none, or "/").
func splitPath(server string) (origin, path string) {
	u, err := url.Parse(server)
	if err != nil || strings.Trim(u.Path, "/") == "" {
		return server, ""
	}
	return u.Scheme + "://" + u.Host, u.Path
}
