package bytesize

import "testing"

func TestIEC(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 3 << 20: "3.0 MiB", 1 << 30: "1.0 GiB", -(3 << 20): "-3.0 MiB"} {
		if got := IEC(n); got != want {
			t.Errorf("IEC(%d) = %q, want %q", n, got, want)
		}
	}
}
