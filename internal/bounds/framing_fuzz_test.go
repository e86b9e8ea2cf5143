package bounds

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"connectrpc.com/connect"
)

// chunked reads from b in chunks of the sizes given, cycling (a network
// delivers a body in pieces of any size).
type chunked struct {
	b     []byte
	sizes []byte
	i     int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := len(p)
	if len(c.sizes) > 0 {
		n = min(n, int(c.sizes[c.i%len(c.sizes)])+1)
		c.i++
	}
	n = copy(p[:n], c.b)
	c.b = c.b[n:]
	return n, nil
}

// model walks body's envelopes whole: how many bytes a reader may pass on
// before the framing breaks, and whether it breaks.
func model(body []byte, compressed bool) (good int, broken bool) {
	for i := 0; i < len(body); {
		if f := body[i]; f != 0 && (f != 1 || !compressed) {
			return i, true
		}
		if len(body)-i < 5 {
			return len(body), true
		}
		size := int(binary.BigEndian.Uint32(body[i+1 : i+5]))
		if len(body)-i-5 < size {
			return len(body), true
		}
		i += 5 + size
	}
	return len(body), false
}

// framedBody passes a body through unchanged, and fails with
// InvalidArgument exactly where its framing breaks, however the body is
// cut into reads.
func FuzzFramedBody(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 2, 'h', 'i'}, []byte{}, false)
	f.Add([]byte{0, 0, 0, 0, 2, 'h', 'i', 1, 0, 0, 0, 0}, []byte{0, 3}, true)
	f.Add([]byte{0, 0, 0, 0, 9, 'h'}, []byte{1}, false)
	f.Add([]byte{0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0}, []byte{6}, false)
	f.Add([]byte{1, 0, 0, 0, 1, 'x'}, []byte{}, false)
	f.Fuzz(func(t *testing.T, body, sizes []byte, compressed bool) {
		r := &framedBody{body: io.NopCloser(&chunked{b: body, sizes: sizes}), header: "grpc-encoding", compressed: compressed}
		got, err := io.ReadAll(r)
		good, broken := model(body, compressed)
		if !bytes.Equal(got, body[:good]) {
			t.Fatalf("passed on %d bytes %x, want the first %d of %x", len(got), got, good, body)
		}
		if !broken {
			if err != nil {
				t.Fatalf("well-framed body: %v", err)
			}
			return
		}
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
			t.Fatalf("broken framing: %v, want invalid_argument", err)
		}
		if _, again := r.Read(make([]byte, 8)); again != err {
			t.Fatalf("a read after the error: %v, want the same error", again)
		}
	})
}
