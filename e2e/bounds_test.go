package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivora/rivora/e2e/creds"
	"github.com/rivora/rivora/e2e/process"
	"github.com/rivora/rivora/proto/rivora/v1/rivorav1connect"
	"github.com/rivora/rivora/sdk"
	"github.com/rivora/rivora/testkit/poll"
)

// procMemory reads a process's resident set and its peak (VmRSS, VmHWM)
// in bytes.
func procMemory(t testing.TB, pid int) (rss, peak int64) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read /proc/%d/status: %v", pid, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	if rss == 0 || peak == 0 {
		t.Fatalf("/proc/%d/status has no VmRSS/VmHWM", pid)
	}
	return rss, peak
}

// gzipZeros is n zero bytes, gzipped.
func gzipZeros(t testing.TB, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	chunk := make([]byte, 1<<20)
	for n > 0 {
		k := min(n, len(chunk))
		if _, err := zw.Write(chunk[:k]); err != nil {
			t.Fatal(err)
		}
		n -= k
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// h2c is an authenticated client speaking HTTP/2 without TLS, as gRPC
// clients do.
func h2c() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: creds.Transport(tr), Timeout: 2 * time.Minute}
}

// grpcCall posts one gRPC message (flags: 1 = compressed) and returns
// grpc-status and grpc-message.
func grpcCall(t testing.TB, client *http.Client, url string, flags byte, msg []byte, encoding string) (string, string) {
	t.Helper()
	frame := make([]byte, 5, 5+len(msg))
	frame[0] = flags
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	frame = append(frame, msg...)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	if encoding != "" {
		req.Header.Set("Grpc-Encoding", encoding)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("gRPC %s: %v", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	status, message := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if status == "" { // trailers-only answer
		status, message = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	return status, message
}

// A body that decompresses to 600 MB (600 KB on the wire) is refused,
// over Connect and gRPC, to Publish and PublishBatch, and the server's
// peak memory grows by well under 100 MB: the message bound applies
// after decompression, and decompression stops just past it.
func TestGzipBombIsRefusedWithinMemory(t *testing.T) {
	d := startDev(t, devOptions{})
	bomb := gzipZeros(t, 600<<20)
	t.Logf("bomb: %d bytes on the wire, 629145600 decompressed", len(bomb))
	pid := d.Pid()
	rss0, peak0 := procMemory(t, pid)

	connectCall := func(procedure string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, d.URL()+procedure, bytes.NewReader(bomb))
		req.Header.Set("Content-Type", "application/proto")
		req.Header.Set("Content-Encoding", "gzip")
		resp, err := authedHTTP.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", procedure, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// The worst case first, alone: the largest bound (a batch, 8 MiB).
	status, body := connectCall(rivorav1connect.IngestServicePublishBatchProcedure)
	if status != http.StatusTooManyRequests || !strings.Contains(body, "resource_exhausted") {
		t.Errorf("Connect PublishBatch with the bomb: %d %s; want 429 resource_exhausted", status, body)
	}
	rss1, peak1 := procMemory(t, pid)
	t.Logf("one bomb to PublishBatch: RSS %d MiB before (peak so far %d MiB), after: RSS %d MiB, peak %d MiB: the peak is %d MiB over the RSS before",
		rss0>>20, peak0>>20, rss1>>20, peak1>>20, (peak1-rss0)>>20)
	if growth := peak1 - rss0; growth > 100<<20 {
		t.Errorf("peak memory grew %d MiB refusing one bomb; want under 100 MiB", growth>>20)
	}

	for _, procedure := range []string{rivorav1connect.IngestServicePublishProcedure, rivorav1connect.AdminServiceCreateDestinationProcedure} {
		start := time.Now()
		status, body := connectCall(procedure)
		if status != http.StatusTooManyRequests || !strings.Contains(body, "resource_exhausted") {
			t.Errorf("Connect %s with the bomb: %d %s; want 429 resource_exhausted", procedure, status, body)
		}
		t.Logf("Connect %s: refused in %v: %s", procedure, time.Since(start).Round(time.Millisecond), body)
	}
	for _, procedure := range []string{rivorav1connect.IngestServicePublishProcedure, rivorav1connect.IngestServicePublishBatchProcedure} {
		start := time.Now()
		status, message := grpcCall(t, h2c(), d.URL()+procedure, 1, bomb, "gzip")
		if status != "8" { // RESOURCE_EXHAUSTED
			t.Errorf("gRPC %s with the bomb: grpc-status %q (%s); want 8", procedure, status, message)
		}
		t.Logf("gRPC %s: refused in %v: %s", procedure, time.Since(start).Round(time.Millisecond), message)
	}
	rss2, peak2 := procMemory(t, pid)
	t.Logf("after five bombs one after the other: RSS %d MiB, peak %d MiB (%d MiB over the RSS before the first)", rss2>>20, peak2>>20, (peak2-rss0)>>20)
	if growth := peak2 - rss0; growth > 100<<20 {
		t.Errorf("peak memory grew %d MiB over five bombs; want under 100 MiB", growth>>20)
	}
}

// A gRPC frame whose bytes are not a message is InvalidArgument, not an
// internal error.
func TestGRPCGarbageFrameIsInvalidArgument(t *testing.T) {
	d := startDev(t, devOptions{})
	garbage := []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x7a, 0x01, 0x02, 0xde, 0xad, 0xbe, 0xef}
	for _, procedure := range []string{rivorav1connect.IngestServicePublishProcedure, rivorav1connect.IngestServicePublishBatchProcedure, rivorav1connect.AdminServiceCreateDestinationProcedure} {
		status, message := grpcCall(t, h2c(), d.URL()+procedure, 0, garbage, "")
		if status != "3" { // INVALID_ARGUMENT
			t.Errorf("gRPC %s with garbage: grpc-status %q (%s); want 3", procedure, status, message)
		}
		t.Logf("gRPC %s with garbage: %s %s", procedure, status, message)
	}
	// Compressed garbage: not gzip at all.
	status, message := grpcCall(t, h2c(), d.URL()+rivorav1connect.IngestServicePublishProcedure, 1, garbage, "gzip")
	if status != "3" {
		t.Errorf("gRPC Publish with a compressed frame that is not gzip: grpc-status %q (%s); want 3", status, message)
	}
}

// holdEnv, set to HOST:PORT N, makes TestHoldConnectionsHelper (this
// test binary, run again as a child) open N connections to HOST:PORT,
// print how many it holds, and keep them until its stdin closes: one
// process may not hold 20,000 (the open-file limit here is 20,000, hard).
const holdEnv = "RIVORA_E2E_HOLD"

func TestHoldConnectionsHelper(t *testing.T) {
	spec := os.Getenv(holdEnv)
	if spec == "" {
		return // only a child run of TestIdleConnectionsDoNotExhaustTheServer does anything
	}
	addr, count, _ := strings.Cut(spec, " ")
	n, _ := strconv.Atoi(count)
	held, failed := dialMany(addr, n)
	fmt.Printf("held %d failed %d\n", len(held), failed)
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range held {
		c.Close()
	}
}

// startChild runs this test binary's helper test in a child process with
// env added (a process may hold only so many connections), and returns
// the first line it prints that starts with report (closed, with none,
// when it ends without). The child runs until the test ends (its stdin
// closes then).
func startChild(t *testing.T, helper, env, report string) <-chan string {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^"+helper+"$", "-test.v")
	child.Env = append(os.Environ(), env)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatalf("start %s: %v", helper, err)
	}
	t.Cleanup(func() { stdin.Close(); _ = child.Wait() })
	reported := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), report) {
				reported <- sc.Text()
			}
		}
		close(reported)
	}()
	return reported
}

// dialMany opens n connections to addr, 256 at a time.
func dialMany(addr string, n int) (held []net.Conn, failed int64) {
	var mu sync.Mutex
	var nfailed atomic.Int64
	var wg sync.WaitGroup
	next := make(chan struct{})
	for range 256 {
		wg.Go(func() {
			for range next {
				conn, err := net.DialTimeout("tcp", addr, 30*time.Second)
				if err != nil {
					nfailed.Add(1)
					continue
				}
				mu.Lock()
				held = append(held, conn)
				mu.Unlock()
			}
		})
	}
	for range n {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	return held, nfailed.Load()
}

// 20,000 idle connections (opened and never used) against a server whose
// open-file limit is 8,192 do not break any partition, and new clients
// are still served: the connection cap (by default half the open-file
// limit) closes the connections idle longest to make room.
func TestIdleConnectionsDoNotExhaustTheServer(t *testing.T) {
	const conns, nofile = 20_000, 8192
	d := &devProc{dataDir: t.TempDir()}
	d.proc = newProc(t, "rivora dev", "prlimit", "127.0.0.1:"+strconv.Itoa(freePort(t)), nil)
	d.logTail = 16 << 10
	d.Args = append([]string{fmt.Sprintf("--nofile=%d:%d", nofile, nofile), "--", rivoraBin}, d.devArgs()...)
	d.run()
	p := newPartner(t)
	createDestination(t, d, "idle", p, "", nil)
	c := d.SDK()
	ctx := ctxTimeout(t, 3*time.Minute)
	if _, err := c.Publish(ctx, sdk.Event{Destination: "idle", Customer: "acme", Lane: "u0", Type: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("publish before the flood: %v", err)
	}

	// The server's open files, sampled through the flood.
	var peakFDs atomic.Int64
	sampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.Pid())); err == nil && int64(len(fds)) > peakFDs.Load() {
				peakFDs.Store(int64(len(fds)))
			}
			select {
			case <-sampling:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	// Half the connections from a child process, half from here.
	start := time.Now()
	childHeld := startChild(t, "TestHoldConnectionsHelper", fmt.Sprintf("%s=%s %d", holdEnv, d.Addr, conns/2), "held ")
	held, failed := dialMany(d.Addr, conns/2)
	t.Cleanup(func() {
		for _, conn := range held {
			conn.Close()
		}
	})
	report, ok := <-childHeld
	if !ok {
		t.Fatalf("the connection holder ended without holding its connections")
	}
	t.Logf("%d connections opened here (%d dials failed), the child: %s; in %v", len(held), failed, report, time.Since(start).Round(time.Millisecond))

	// While they are held: a new client is served, healthz is 200 and
	// every partition still works.
	served := time.Now()
	fresh := sdk.New(d.URL(), sdk.WithHTTPClient(&http.Client{Transport: creds.Transport(&http.Transport{}), Timeout: 30 * time.Second}))
	id, err := fresh.Publish(ctx, sdk.Event{Destination: "idle", Customer: "acme", Lane: "u1", Type: "t", Payload: []byte(`{"after":"flood"}`)})
	if err != nil {
		t.Fatalf("a new client during the flood: %v", err)
	}
	t.Logf("a new client's publish during the flood took %v", time.Since(served).Round(time.Millisecond))
	if err := poll.Check(30*time.Second, 100*time.Millisecond, func() error {
		if got := p.Delivered(); got < 2 {
			return fmt.Errorf("%d of 2 events delivered", got)
		}
		return nil
	}); err != nil {
		t.Fatalf("delivery during the flood: %v (event %s)", err, id)
	}
	close(sampling)
	<-sampled
	t.Logf("server open files: at most %d through the flood (open-file limit %d)", peakFDs.Load(), nofile)
	if peakFDs.Load() >= nofile-256 {
		t.Errorf("the server came within 256 of its open-file limit (%d of %d)", peakFDs.Load(), nofile)
	}
	if err := process.GetOK(ctx, &http.Client{Timeout: 10 * time.Second}, d.URL()+"/healthz"); err != nil {
		t.Fatalf("healthz during the flood: %v", err)
	}
	closed := 0
	for _, conn := range held {
		_ = conn.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := bufio.NewReader(conn).ReadByte(); err == io.EOF {
			closed++
		}
	}
	t.Logf("%d of the held connections were closed by the server to make room", closed)
	log, _ := os.ReadFile(d.LogPath)
	if !bytes.Contains(log, []byte("max_connections=4096")) {
		t.Errorf("the server did not cap connections at half its open-file limit (4096); its log:\n%s", log)
	}
	for _, bad := range []string{"too many open files", "partition failed", "lane store write failed"} {
		if bytes.Contains(log, []byte(bad)) {
			t.Errorf("server log has %q during the flood", bad)
		}
	}
}
