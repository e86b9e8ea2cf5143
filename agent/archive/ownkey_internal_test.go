package archive

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// Past the numbered variants, a name of the dead letters' own that holds
// an object this agent cannot read (a newer agent's, say) does not stop
// archiving: the write goes under a random name, and nothing is lost.
func TestPutPastTheOwnNameTakenByAnUnreadableObject(t *testing.T) {
	d, err := NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := time.Date(2031, 2, 4, 1, 2, 3, 0, time.UTC)
	dead := func(id string) []*rivorav1.DeadLetter {
		return []*rivorav1.DeadLetter{{Event: &rivorav1.Event{EventId: id, DestinationId: "orders"}, DeadAt: timestamppb.New(at), Reason: rivorav1.DeadReason_DEAD_REASON_MAX_ATTEMPTS}}
	}
	key := Key("orders", at, 0, 1, 1)
	for n := 1; n <= maxVariants; n++ {
		if written, err := d.Put(ctx, key, dead("other-"+string(rune('a'+n)))); err != nil || written != VariantKey(key, n) {
			t.Fatalf("write %d: %s, %v; want %s", n, written, err, VariantKey(key, n))
		}
	}
	mine := dead("mine")
	own := ownKey(key, mine)
	if created, err := d.create(ctx, own, []byte("not gzip")); err != nil || !created {
		t.Fatalf("planting an unreadable object at %s: %v, %v", own, created, err)
	}
	written, err := d.Put(ctx, key, mine)
	if err != nil || written == own || !strings.Contains(written, "_r") {
		t.Fatalf("Put = %s, %v; want a random name other than %s", written, err, own)
	}
	got, err := d.Get(ctx, written)
	if err != nil || len(got) != 1 || got[0].GetEvent().GetEventId() != "mine" {
		t.Fatalf("Get(%s) = %v, %v; want the dead letter written", written, got, err)
	}
}
