package buildinfo

import (
	"strings"
	"testing"
)

// A version given at link time is the version; without one it is "dev",
// with the commit when the toolchain stamped one.
func TestVersion(t *testing.T) {
	if got := Version(); !strings.HasPrefix(got, "dev") {
		t.Fatalf("Version() = %q without a link-time version, want dev…", got)
	}
	version = "v1.2.3"
	defer func() { version = "dev" }()
	if got := Version(); got != "v1.2.3" {
		t.Fatalf("Version() = %q, want the link-time v1.2.3", got)
	}
}
