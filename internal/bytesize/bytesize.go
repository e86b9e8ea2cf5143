// Package bytesize prints byte counts for people: rivoractl's tables and
// the agent's and the edge's messages say sizes the same way.
package bytesize

import "fmt"

// IEC prints n bytes in IEC units: "0 B", "512 B", "1.5 KiB", "3.0 MiB"
// (a negative count with a minus sign).
func IEC(n int64) string {
	if n < 0 {
		return "-" + IEC(-n)
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
