package delivery

import "net/http"

// setCustomHeaders puts a destination's custom headers on an attempt. It
// runs before Rivora sets its own, so that a name Rivora sets always
// carries Rivora's value (the control plane refuses those names anyway).
func setCustomHeaders(h, custom http.Header) {
	for name, values := range custom {
		h[name] = values
	}
}
