package agent_test

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
	"github.com/rivora/rivora/testkit/partner"
	"github.com/rivora/rivora/testkit/rig"
)

// BenchmarkPublishHTTP is one keyed Publish at a time through the whole
// server path: a Connect client over a loopback HTTP/1.1 connection, the
// door, the interceptors, the gateway, the lane writer and the embedded
// JetStream (`rivora dev` in process, rig.StartDev). Its destination's
// budget is almost empty, so the events stay pending and nothing is
// delivered meanwhile. cpu-ns/call is the process's CPU per call (the
// client's included, which changes with neither side's Rivora code):
// steadier than wall time on a shared machine. allocs/op counts the
// whole process too.
func BenchmarkPublishHTTP(b *testing.B) {
	d := rig.StartDev(b, b.TempDir(), rig.Options{Name: "bench", Workers: 4})
	p := partner.New(b, partner.Options{CountOnly: true})
	d.Create(&rivorav1.CreateDestinationRequest{Id: "orders", Url: p.URL(), Secret: secret, Limits: &rivorav1.Limits{RatePerSecond: 0.001, Burst: 1}})
	payload := []byte(`{"order":1,"pad":"` + strings.Repeat("a", 256-20) + `"}`)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	publish := func(i int) {
		_, err := d.Ingest.Publish(context.Background(), connect.NewRequest(&rivorav1.PublishRequest{
			DestinationId: "orders", CustomerId: "bench", LaneKey: "lane-" + strconv.Itoa(i%2000),
			Type: "bench.event", Payload: payload, IdempotencyKey: run + "-" + strconv.Itoa(i),
		}))
		if err != nil {
			b.Fatal(err)
		}
	}
	// Warm the connection, the lanes' writer and the partition's
	// direct path (the first appends may go through INGEST).
	for i := range 500 {
		publish(-1 - i)
	}
	b.ReportAllocs()
	cpu0 := processCPU(b)
	i := 0
	for b.Loop() {
		publish(i)
		i++
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/call")
}

// processCPU is the user and system CPU this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
