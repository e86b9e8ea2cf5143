package history_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/rivora/rivora/agent/history"
)

// v7At is a UUIDv7 whose time is t.
func v7At(t *testing.T, at time.Time) string {
	t.Helper()
	u, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	ms := at.UnixMilli()
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	return u.String()
}

func TestAcceptBucket(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 30, 59, 999e6, time.UTC)
	want := strconv.FormatInt(at.Unix()/5, 10)
	if got := history.AcceptBucket(v7At(t, at), at); got != want {
		t.Fatalf("AcceptBucket(v7 at %s) = %s, want %s", at, got, want)
	}
	if got := history.AcceptBucket(v7At(t, at), at); got != strconv.FormatInt(history.Bucket(at), 10) {
		t.Fatalf("AcceptBucket(v7 at %s) = %s, want Bucket(%s) = %d", at, got, at, history.Bucket(at))
	}
	for _, id := range []string{uuid.NewString() /* v4 */, "order-42", "", "0190a1b2-c3d4-7e5f-0000-zzzzzzzzzzzz"} {
		if got := history.AcceptBucket(id, at); got != history.Keyed {
			t.Errorf("AcceptBucket(%q) = %s, want %s (not a UUIDv7)", id, got, history.Keyed)
		}
	}
	if got := history.BucketStart(history.Bucket(at)); !got.Equal(time.Date(2026, 12, 1, 10, 30, 55, 0, time.UTC)) {
		t.Fatalf("BucketStart(Bucket(%s)) = %s, want 10:30:55", at, got)
	}
}

// A UUIDv7 id's time is its publisher's choice when it comes from an
// idempotency key: it names the acceptance bucket only when it is the
// bucket the event was accepted in or the one before, so the subjects an
// event's records go to never depend on a time the client picked.
func TestAcceptBucketTrustsAnIDsTimeOnlyNearAcceptance(t *testing.T) {
	accepted := time.Date(2026, 12, 1, 10, 30, 2, 0, time.UTC) // bucket 10:30:00
	bucket := func(at time.Time) string { return strconv.FormatInt(history.Bucket(at), 10) }
	for _, c := range []struct {
		idTime time.Time
		want   string
	}{
		{accepted, bucket(accepted)},
		{accepted.Add(-2 * time.Second), bucket(accepted)},                       // 10:30:00, same bucket
		{accepted.Add(-3 * time.Second), bucket(accepted.Add(-5 * time.Second))}, // 10:29:59, the bucket before
		{accepted.Add(-8 * time.Second), history.Unbucketed},                     // two buckets before
		{accepted.Add(3 * time.Second), history.Unbucketed},                      // the next bucket
		{accepted.Add(-72 * time.Hour), history.Unbucketed},
		{time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC), history.Unbucketed},
	} {
		if got := history.AcceptBucket(v7At(t, c.idTime), accepted); got != c.want {
			t.Errorf("AcceptBucket(v7 at %s, accepted %s) = %s, want %s", c.idTime.Format(time.TimeOnly), accepted.Format(time.TimeOnly), got, c.want)
		}
	}
	if got := history.AcceptBucket(v7At(t, accepted), time.Time{}); got != history.Unbucketed {
		t.Errorf("AcceptBucket(v7, no acceptance time) = %s, want %s", got, history.Unbucketed)
	}
}

func TestShardIsStableAndSpread(t *testing.T) {
	seen := make(map[int]int)
	for i := range history.Shards * 50 {
		id := "ev-" + strconv.Itoa(i)
		s := history.Shard(id)
		if s < 0 || s >= history.Shards || s != history.Shard(id) {
			t.Fatalf("Shard(%s) = %d: not stable or out of [0, %d)", id, s, history.Shards)
		}
		seen[s]++
	}
	if len(seen) != history.Shards {
		t.Fatalf("%d ids fell in %d shards, want all %d", history.Shards*50, len(seen), history.Shards)
	}
}

func TestSubjectsAreByHourWriteBucketAcceptBucketAndShard(t *testing.T) {
	accepted := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	id := v7At(t, accepted)
	written := accepted.Add(3*time.Hour + 30*time.Second)
	shard := strconv.Itoa(history.Shard(id))
	h := strconv.FormatInt(written.Unix()/3600, 10)
	w, a := strconv.FormatInt(written.Unix()/5, 10), strconv.FormatInt(accepted.Unix()/5, 10)
	if got, want := history.OutcomeSubject(written, id, accepted), "history.o."+h+"."+w+"."+a+"."+shard; got != want {
		t.Fatalf("OutcomeSubject = %s, want %s", got, want)
	}
	wb, ab := strconv.FormatInt(written.Unix()/60, 10), strconv.FormatInt(accepted.Unix()/60, 10)
	if got, want := history.BodySubject(written, id, accepted), "history.b."+h+"."+wb+"."+ab+"."+shard; got != want {
		t.Fatalf("BodySubject = %s, want %s", got, want)
	}
	// Resent hours later: the id's time is no longer the acceptance's.
	if got, want := history.OutcomeSubject(written, id, written), "history.o."+h+"."+w+".u."+shard; got != want {
		t.Fatalf("OutcomeSubject(resent) = %s, want %s", got, want)
	}
	// Any string is a valid idempotency key; its subject stays one
	// well-formed NATS subject.
	if got := history.OutcomeSubject(written, "order.42 *>", accepted); strings.Count(got, ".") != 5 || !strings.Contains(got, ".k.") {
		t.Fatalf("OutcomeSubject(keyed) = %s, want history.o.<h>.<w>.k.<s>", got)
	}
}
