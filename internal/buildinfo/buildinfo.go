// Package buildinfo names the build a binary came from, for --version and
// the User-Agent: the version given at link time (-ldflags "-X
// github.com/rivora/rivora/internal/buildinfo.version=v1.2.3"), else
// "dev" and the commit the Go toolchain stamped (go build in a checkout;
// go run stamps none).
package buildinfo

import "runtime/debug"

var version = "dev"

// Version is the build's version: "v1.2.3", "dev (4b0207d)", or "dev
// (4b0207d, modified)" when built from a checkout with changes.
func Version() string {
	if version != "dev" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return version
	}
	var revision string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if revision == "" {
		return version
	}
	out := version + " (" + revision[:min(len(revision), 7)]
	if modified {
		out += ", modified"
	}
	return out + ")"
}
