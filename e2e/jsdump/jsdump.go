// Package jsdump prints a JetStream cluster's streams and consumers with
// their replica state: what e2e tests and benchmarks show when events go
// missing.
package jsdump

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Dump writes every stream's and consumer's state as the NATS server at
// natsURL sees it; opts carry credentials and TLS roots.
func Dump(ctx context.Context, w io.Writer, natsURL string, opts ...nats.Option) {
	nc, err := nats.Connect(natsURL, append([]nats.Option{nats.Name("rivora-jsdump"), nats.Timeout(5 * time.Second)}, opts...)...)
	if err != nil {
		fmt.Fprintf(w, "jetstream state: connect to %s: %v\n", natsURL, err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintf(w, "jetstream state: %v\n", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cluster := func(ci *jetstream.ClusterInfo) string {
		if ci == nil {
			return "no cluster info"
		}
		var b strings.Builder
		fmt.Fprintf(&b, "leader %q", ci.Leader)
		for _, r := range ci.Replicas {
			fmt.Fprintf(&b, ", %s(current=%v offline=%v lag=%d active=%s)", r.Name, r.Current, r.Offline, r.Lag, r.Active.Round(time.Millisecond))
		}
		return b.String()
	}
	fmt.Fprintf(w, "---- JetStream state seen from %s ----\n", natsURL)
	streams := js.ListStreams(ctx)
	var names []string
	infos := map[string]*jetstream.StreamInfo{}
	for si := range streams.Info() {
		names = append(names, si.Config.Name)
		infos[si.Config.Name] = si
	}
	if err := streams.Err(); err != nil {
		fmt.Fprintf(w, "list streams: %v\n", err)
	}
	slices.Sort(names)
	for _, name := range names {
		si := infos[name]
		fmt.Fprintf(w, "stream %s: R%d msgs=%d seq=%d..%d; %s\n", name, si.Config.Replicas, si.State.Msgs,
			si.State.FirstSeq, si.State.LastSeq, cluster(si.Cluster))
		st, err := js.Stream(ctx, name)
		if err != nil {
			fmt.Fprintf(w, "  stream %s: %v\n", name, err)
			continue
		}
		cons := st.ListConsumers(ctx)
		for ci := range cons.Info() {
			fmt.Fprintf(w, "  consumer %s: pending=%d ack_pending=%d delivered=%d ack_floor=%d; %s\n", ci.Name, ci.NumPending,
				ci.NumAckPending, ci.Delivered.Stream, ci.AckFloor.Stream, cluster(ci.Cluster))
		}
		if err := cons.Err(); err != nil {
			fmt.Fprintf(w, "  consumers of %s: %v\n", name, err)
		}
	}
}
