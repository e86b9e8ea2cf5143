package bounds

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"
)

// A request body must keep coming: its first bytes within BodyGrace, and
// on average at least BodyMinRate bytes a second after that grace, and all
// of it within MaxBodyTime. A client that trickles a body (or sends
// headers and then nothing) is cut at once when it falls behind, instead
// of holding a connection slot, a goroutine and its buffers until the
// server's read timeout. A legitimate client on the networks Rivora's
// clients sit on sends a 256 KiB event in well under a second; 16 KiB/s
// lets a 1 MiB batch take a minute.
const (
	BodyGrace   = 5 * time.Second
	BodyMinRate = 16 << 10
	// MaxBodyTime bounds a whole request's arrival, headers and body (the
	// servers' http.Server.ReadTimeout).
	MaxBodyTime = time.Minute
)

// Pace is how fast a body must arrive.
type Pace struct {
	Grace   time.Duration // for the first bytes, and added to what MinRate earns
	MinRate int64         // bytes a second, on average
	Max     time.Duration // for the whole body
}

// BodyPace is the pace Handler enforces.
var BodyPace = Pace{Grace: BodyGrace, MinRate: BodyMinRate, Max: MaxBodyTime}

// pacedBody enforces a body's pace through the connection's (or HTTP/2
// stream's) read deadline, which it moves on as bytes arrive. Once the
// body has ended the deadline is lifted, so a stream that answers for
// long after its request (Watch) is not cut.
type pacedBody struct {
	io.ReadCloser
	pace    Pace
	rc      *http.ResponseController
	start   time.Time
	read    int64
	setTill time.Time // the deadline last set
}

// Apply makes r's body keep pace p, through w's read deadline.
func (p Pace) Apply(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	b := &pacedBody{ReadCloser: r.Body, pace: p, rc: http.NewResponseController(w), start: time.Now()}
	b.setTill = b.start.Add(p.Grace)
	if err := b.rc.SetReadDeadline(b.setTill); err != nil {
		return // a writer without deadlines: the server's ReadTimeout alone
	}
	r.Body = b
}

func (b *pacedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if err != nil {
		if err == io.EOF {
			_ = b.rc.SetReadDeadline(time.Time{})
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Coded, so connect-go answers it as is.
			err = connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("the request body arrived too slowly (%d bytes in %s; a body must start within %s and then average %d bytes/s): %w",
				b.read, time.Since(b.start).Round(time.Millisecond), b.pace.Grace, b.pace.MinRate, err))
		}
		return n, err
	}
	// Moved on only by a grace at a time (80 KiB of body at the defaults):
	// on HTTP/2 each move is a message to the connection's goroutine.
	if till := b.deadline(); till.Sub(b.setTill) >= b.pace.Grace {
		b.setTill = till
		_ = b.rc.SetReadDeadline(till)
	}
	return n, nil
}

// deadline is when the body must have gone further than it has.
func (b *pacedBody) deadline() time.Time {
	earned := time.Duration(float64(b.read) / float64(b.pace.MinRate) * float64(time.Second))
	return b.start.Add(min(b.pace.Grace+earned, b.pace.Max))
}
