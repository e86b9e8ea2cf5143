package bounds

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// framing answers InvalidArgument, saying what is wrong, to an enveloped
// request (gRPC, gRPC-Web, the Connect protocol's streams) whose framing
// is broken: a body cut short, a compressed flag with no compression
// named, flags a request may not carry. The fault is the client's, but
// connect-go answers Internal ("protocol error: …"), and it reads a unary
// request before any interceptor runs, so no interceptor can remap it.
// The body is the seam: connect-go passes a coded error from the request
// body through as it is (as it does http.MaxBytesReader's, as
// ResourceExhausted) and writes it in each protocol's own form, so the
// body fails with the right code where the framing breaks. framing_test
// holds connect-go to that on an upgrade.
func framing(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if header := encodingHeader(r.Header.Get("Content-Type")); header != "" {
			enc := r.Header.Get(header)
			r.Body = &framedBody{body: r.Body, header: strings.ToLower(header), compressed: enc != "" && enc != "identity"}
		}
		h.ServeHTTP(w, r)
	})
}

// encodingHeader names the header that says how an enveloped request's
// messages are compressed, or is "" for a content type that is not
// enveloped (the Connect protocol's unary form, anything else).
func encodingHeader(contentType string) string {
	contentType = strings.ToLower(strings.TrimSpace(contentType)) // as connect-go matches it
	switch {
	case strings.HasPrefix(contentType, "application/grpc"): // gRPC and gRPC-Web
		return "Grpc-Encoding"
	case strings.HasPrefix(contentType, "application/connect+"):
		return "Connect-Content-Encoding"
	}
	return ""
}

// framedBody follows the envelopes of a request body as they are read:
// a flags byte (0, or 1 for a compressed message), a 4-byte big-endian
// length, then that many bytes of message.
type framedBody struct {
	body       io.ReadCloser
	header     string // the compression header, for errors
	compressed bool   // the request names a compression, so flag 1 is allowed
	prefix     int    // bytes of the current envelope's prefix read, 0–4
	length     [4]byte
	size, left uint32 // the current message's length, and how much of it is still to come
	err        error  // the framing error the next Read returns
}

func (b *framedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.body.Read(p)
	for i := 0; i < n; {
		if b.left > 0 {
			k := min(uint32(n-i), b.left)
			b.left -= k
			i += int(k)
			continue
		}
		if b.prefix == 0 {
			if b.err = b.checkFlags(p[i]); b.err != nil {
				// Hold the flags byte back, so the prefix connect-go is
				// reading fails here, with this error, not with its own.
				return i, nil
			}
		} else {
			b.length[b.prefix-1] = p[i]
		}
		b.prefix++
		i++
		if b.prefix == 5 {
			b.prefix, b.size = 0, binary.BigEndian.Uint32(b.length[:])
			b.left = b.size
		}
	}
	if errors.Is(err, io.EOF) {
		switch {
		case b.prefix > 0:
			b.err = malformed("the body ended %d bytes into the 5-byte envelope prefix", b.prefix)
		case b.left > 0:
			b.err = malformed("the body ended after %d of the %d message bytes its envelope promised", b.size-b.left, b.size)
		}
		if b.err != nil {
			return n, b.err
		}
	}
	return n, err
}

func (b *framedBody) checkFlags(flags byte) error {
	switch {
	case flags == 0, flags == 1 && b.compressed:
		return nil
	case flags == 1:
		return malformed("envelope flags 0x01 mark the message compressed, but %s names no compression", b.header)
	}
	return malformed("envelope flags 0x%02x: a request's message carries 0x00, or 0x01 when compressed", flags)
}

func (b *framedBody) Close() error { return b.body.Close() }

func malformed(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("malformed request: "+format, args...))
}
