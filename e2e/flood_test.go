package e2e

// Issue 22: no stranger can exhaust a server. Callers without a token are
// refused from their headers, before any body is read; a body must keep
// a pace; HTTP/2 streams per connection and calls in flight are bounded.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rivora/rivora/e2e/creds"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
)

// h2Flood keeps conns h2c connections to addr busy until stop closes: on
// each it opens streams unauthenticated gRPC Publish calls whose bodies
// trickle one byte per stream every tick, reads (and drops) whatever the
// server answers, and connects again as soon as the server lets a
// connection go. It returns once every connection has opened its first
// streams, and a count of connections made.
func h2Flood(t *testing.T, addr string, conns, streams int, tick time.Duration, stop <-chan struct{}) (*sync.WaitGroup, *atomic.Int64) {
	t.Helper()
	var wg sync.WaitGroup
	var dials atomic.Int64
	opened := make(chan error, conns)
	for range conns {
		wg.Go(func() {
			first := true
			for {
				dials.Add(1)
				err := h2Attack(addr, streams, tick, stop, func(err error) {
					if first {
						opened <- err
						first = false
					}
				})
				select {
				case <-stop:
					return
				default:
				}
				if err != nil && first {
					opened <- err
					return
				}
			}
		})
	}
	failed := 0
	for range conns {
		if err := <-opened; err != nil {
			failed++
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d flood connections could not open their streams", failed, conns)
	}
	return &wg, &dials
}

// h2Attack is one flood connection: it returns when the server lets it go
// or stop closes; opened learns whether its streams were opened.
func h2Attack(addr string, streams int, tick time.Duration, stop <-chan struct{}, opened func(error)) error {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	go io.Copy(io.Discard, conn) // the server's answers, never looked at
	w := bufio.NewWriter(conn)
	fr := http2.NewFramer(w, nil)
	if _, err := w.WriteString(http2.ClientPreface); err != nil {
		return err
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", addr},
		{":path", rivorav1connect.IngestServicePublishProcedure}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	err = fr.WriteSettings()
	for i := range streams {
		if err != nil {
			break
		}
		err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndHeaders: true})
	}
	if err == nil {
		err = w.Flush()
	}
	opened(err)
	for err == nil {
		select {
		case <-stop:
			return nil
		case <-time.After(tick):
		}
		for i := range streams {
			if err = fr.WriteData(uint32(2*i+1), false, []byte{0}); err != nil {
				break
			}
		}
		if err == nil {
			err = w.Flush()
		}
	}
	return err
}

// publishTook publishes one event on a fresh authenticated connection and
// returns how long it took.
func publishTook(t *testing.T, d *devProc, lane string) time.Duration {
	t.Helper()
	c := sdk.New(d.URL(), sdk.WithHTTPClient(&http.Client{Transport: creds.Transport(&http.Transport{}), Timeout: 30 * time.Second}))
	start := time.Now()
	if _, err := c.Publish(ctxTimeout(t, 30*time.Second), sdk.Event{Destination: "flood", Customer: "acme", Lane: lane, Type: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("a legitimate publish during the flood: %v", err)
	}
	return time.Since(start)
}

// 100 unauthenticated h2c connections × 250 streams whose bodies trickle
// (connecting again whenever the server lets one go) raise the server's
// memory by less than 100 MB, and a legitimate authenticated publish
// during the attack answers within 1 s.
func TestH2CStreamFloodWithinMemory(t *testing.T) {
	d := startDev(t, devOptions{})
	p := newPartner(t)
	createDestination(t, d, "flood", p, "", nil)
	publishTook(t, d, "warm")
	before, _ := procMemory(t, d.Pid())

	stop := make(chan struct{})
	flood, dials := h2Flood(t, d.Addr, 100, 250, 500*time.Millisecond, stop)
	var worst time.Duration
	var took []string
	for i := range 10 {
		d := publishTook(t, d, "during-"+strconv.Itoa(i))
		worst = max(worst, d)
		took = append(took, d.Round(time.Millisecond).String())
		time.Sleep(500 * time.Millisecond) // spread over the attack's trickle
	}
	t.Logf("legitimate publishes during the flood took %s", strings.Join(took, " "))
	rss, peak := procMemory(t, d.Pid())
	close(stop)
	flood.Wait()
	t.Logf("RSS before %d MB, during %d MB, peak %d MB; slowest legitimate publish during the flood %v; the flood made %d connections",
		before>>20, rss>>20, peak>>20, worst.Round(time.Millisecond), dials.Load())
	if grew := peak - before; grew >= 100<<20 {
		t.Errorf("the flood raised the server's peak memory by %d MB, want < 100 MB", grew>>20)
	}
	if worst > time.Second {
		t.Errorf("a legitimate publish took %v during the flood, want ≤ 1 s", worst)
	}
}

// tricklerEnv makes a child run of TestTricklersHelper hold trickling
// connections (this process alone may not hold 10,000 beside its own).
const tricklerEnv = "RIVORA_E2E_TRICKLE"

// TestTricklersHelper, in a child process, opens N connections to ADDR,
// each trickling an unauthenticated Publish's body one byte a second,
// until its stdin closes.
func TestTricklersHelper(t *testing.T) {
	spec := os.Getenv(tricklerEnv)
	if spec == "" {
		return // only a child run of TestTricklingConnectionsDoNotDelayACall does anything
	}
	addr, count, _ := strings.Cut(spec, " ")
	n, _ := strconv.Atoi(count)
	stop := make(chan struct{})
	held := trickle(addr, n, stop)
	fmt.Printf("trickling %d\n", held)
	_, _ = io.Copy(io.Discard, os.Stdin)
	close(stop)
}

// trickle opens n connections to addr (256 dials at a time), each sending
// an unauthenticated Publish's headers and then one body byte a second.
// It returns how many it opened; they trickle until stop closes.
func trickle(addr string, n int, stop <-chan struct{}) int {
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	next := make(chan struct{})
	for range 256 {
		wg.Go(func() {
			for range next {
				conn, err := net.DialTimeout("tcp", addr, 30*time.Second)
				if err != nil {
					continue
				}
				_, _ = io.WriteString(conn, "POST "+rivorav1connect.IngestServicePublishProcedure+" HTTP/1.1\r\nHost: "+addr+
					"\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
				mu.Lock()
				conns = append(conns, conn)
				mu.Unlock()
			}
		})
	}
	for range n {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	go func() {
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			for _, c := range conns {
				_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
				_, _ = c.Write([]byte("x")) // a closed one fails: the server let it go
			}
		}
	}()
	return len(conns)
}

// 10,000 unauthenticated connections trickling bodies (the default
// connection cap) do not delay a legitimate call by more than 1 s: a call
// without a token is refused from its headers and its connection closed,
// so they never hold the cap.
func TestTricklingConnectionsDoNotDelayACall(t *testing.T) {
	const conns = 10_000
	d := startDev(t, devOptions{})
	p := newPartner(t)
	createDestination(t, d, "flood", p, "", nil)
	baseline := publishTook(t, d, "warm")

	childHeld := startChild(t, "TestTricklersHelper", fmt.Sprintf("%s=%s %d", tricklerEnv, d.Addr, conns/2), "trickling ")
	stop := make(chan struct{})
	defer close(stop)
	here := trickle(d.Addr, conns/2, stop)
	report, ok := <-childHeld
	if !ok {
		t.Fatal("the trickler ended without opening its connections")
	}
	t.Logf("%d trickling connections opened here, the child: %s", here, report)

	var worst time.Duration
	for i := range 10 {
		worst = max(worst, publishTook(t, d, "during-"+strconv.Itoa(i)))
		time.Sleep(300 * time.Millisecond) // spread over the trickle
	}
	t.Logf("a legitimate publish: %v before the tricklers, at worst %v among them", baseline.Round(time.Millisecond), worst.Round(time.Millisecond))
	if worst > baseline+time.Second {
		t.Errorf("a legitimate publish took %v among 10,000 tricklers (%v before them), want at most 1 s more", worst, baseline)
	}
}
