//go:build !unix

package natsd

import "os"

// lockFile takes no lock where there is no flock(2): nothing keeps two
// processes off one data dir there.
func lockFile(*os.File) (bool, error) { return true, nil }
