package diskroom

// Look makes w look at the store now (Run does every second).
func Look(w *Watch) { w.look() }
