package history

import "time"

// SetNow makes h write (and list) as if the time were now().
func SetNow(h *History, now func() time.Time) { h.now = now }
