package destinations

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func manyDestinations(n int) []*rivorav1.Destination {
	out := make([]*rivorav1.Destination, n)
	for i := range out {
		out[i] = &rivorav1.Destination{Id: fmt.Sprintf("d-%05d", i), Url: "https://example.com/hook", Secret: testSecret}
	}
	return out
}

// A change copies only the shard it touches; the set readers may still
// hold is never modified.
func TestRegistryUpdateCopiesOnlyWhatItChanges(t *testing.T) {
	r := NewRegistry()
	list := manyDestinations(10_000)
	r.Replace(time.Now(), list)
	before := r.current.Load()
	paused := &rivorav1.Destination{Id: "d-00042", Url: "https://example.com/hook", Secret: testSecret, Paused: true}
	r.Update(time.Now(), []*rivorav1.Destination{paused}, []string{"d-00043"})
	after := r.current.Load()
	touched := map[int]bool{shardOf("d-00042"): true, shardOf("d-00043"): true}
	for i := range after {
		same := reflect.ValueOf(after[i]).UnsafePointer() == reflect.ValueOf(before[i]).UnsafePointer()
		if same == touched[i] {
			t.Fatalf("shard %d: shared %v, touched %v; want shared exactly when untouched", i, same, touched[i])
		}
	}
	if d := before[shardOf("d-00042")]["d-00042"]; d == nil || d.Paused {
		t.Fatalf("the earlier set changed: d-00042 = %+v", d)
	}
	if before[shardOf("d-00043")]["d-00043"] == nil {
		t.Fatal("the earlier set lost d-00043")
	}
	if d, ok := r.Get("d-00042"); !ok || !d.Paused {
		t.Fatalf("Get(d-00042) = %+v, %v; want it paused", d, ok)
	}
	if _, ok := r.Get("d-00043"); ok {
		t.Fatal("d-00043 is still there after its removal")
	}
	if n := len(r.All()); n != len(list)-1 {
		t.Fatalf("All: %d destinations, want %d", n, len(list)-1)
	}
}

// One destination changed among 10k: what resuming each of them costs.
func BenchmarkRegistryUpdate10k(b *testing.B) {
	r := NewRegistry()
	list := manyDestinations(10_000)
	r.Replace(time.Now(), list)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.Update(time.Now(), list[i%len(list):i%len(list)+1], nil)
		i++
	}
}
