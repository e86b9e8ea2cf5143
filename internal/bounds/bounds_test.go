package bounds_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rivora/rivora/internal/bounds"
	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

func TestCheckStrings(t *testing.T) {
	ok := &rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{{DestinationId: "d", Type: "t", Payload: make([]byte, 1<<20)}}}
	if err := bounds.CheckStrings(ok); err != nil {
		t.Fatalf("a batch within bounds (payloads are bytes, bounded by size): %v", err)
	}
	cases := []struct {
		what string
		err  error
		want string
	}{
		{"url", bounds.CheckStrings(&rivorav1.CreateDestinationRequest{Url: strings.Repeat("u", 5242880)}), "url is 5242880 bytes; the limit is 2048"},
		{"nested list", bounds.CheckStrings(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{{}, {}, {ContentType: strings.Repeat("c", 5000)}}}), "events[2].content_type is 5000 bytes; the limit is 4096"},
		{"map key", bounds.CheckStrings(&rivorav1.Destination{CustomerWeights: map[string]float64{strings.Repeat("k", 4097): 1}}), "customer_weights key is 4097 bytes; the limit is 4096"},
		{"within bounds", bounds.CheckStrings(&rivorav1.Destination{Url: strings.Repeat("u", 2048), CustomerWeights: map[string]float64{"acme": 2}}), ""},
		{"audit entry", bounds.CheckStrings(&rivorav1.RecordAuditRequest{Entry: &rivorav1.AuditEntry{Detail: strings.Repeat("d", 1025)}}), "entry.detail is 1025 bytes; the limit is 1024"},
	}
	for _, c := range cases {
		if c.want == "" {
			if c.err != nil {
				t.Errorf("%s: %v, want nil", c.what, c.err)
			}
			continue
		}
		if c.err == nil || c.err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.what, c.err, c.want)
		}
	}
}

func BenchmarkCheckStringsBatch(b *testing.B) {
	batch := &rivorav1.PublishBatchRequest{}
	for range 1000 {
		batch.Events = append(batch.Events, &rivorav1.PublishRequest{DestinationId: "orders", CustomerId: "acme", LaneKey: "user_123", Type: "order.created", Payload: make([]byte, 256), IdempotencyKey: "0190c8e2-7f4e-7c1a-9a6b-3d2f1e0c9b8a"})
	}
	for b.Loop() {
		if err := bounds.CheckStrings(batch); err != nil {
			b.Fatal(err)
		}
	}
}

// The hand-written check of PublishRequest covers every string field it
// has: each one, too long, is refused (a field added to the proto and not
// to checkPublish fails here).
func TestPublishFastPathCoversEveryField(t *testing.T) {
	fields := (&rivorav1.PublishRequest{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Kind() != protoreflect.StringKind {
			continue
		}
		ev := &rivorav1.PublishRequest{}
		ev.ProtoReflect().Set(fd, protoreflect.ValueOfString(strings.Repeat("x", bounds.Other+1)))
		want := fmt.Sprintf("events[0].%s is %d bytes; the limit is %d", fd.Name(), bounds.Other+1, bounds.Other)
		if err := bounds.CheckStrings(&rivorav1.PublishBatchRequest{Events: []*rivorav1.PublishRequest{ev}}); err == nil || err.Error() != want {
			t.Errorf("%s too long: %v, want %q", fd.Name(), err, want)
		}
	}
}

// Truncate keeps a value within its limit, at a rune boundary, and says
// how long the value was.
func TestTruncate(t *testing.T) {
	if got := bounds.Truncate("short", 10); got != "short" {
		t.Errorf("a value within the limit changed: %q", got)
	}
	long := strings.Repeat("é", 3<<20) // 6 MB of two-byte runes
	got := bounds.Truncate(long, bounds.AuditDetail)
	if len(got) > bounds.AuditDetail || !utf8.ValidString(got) || !strings.HasSuffix(got, fmt.Sprintf("[cut: %d bytes]", len(long))) {
		t.Errorf("Truncate(6 MB) = %d bytes, valid UTF-8 %v, ends %q", len(got), utf8.ValidString(got), got[max(0, len(got)-40):])
	}
	for limit := range 30 {
		if got := bounds.Truncate(long, limit); len(got) > limit || !utf8.ValidString(got) {
			t.Errorf("Truncate(long, %d) = %q", limit, got)
		}
	}
}
