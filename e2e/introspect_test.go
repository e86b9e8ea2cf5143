package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// bufBin is the pinned buf that `make proto` installs (tools/buf),
// installed here too when the test runs alone on a fresh clone.
func bufBin(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "tools", "buf", "node_modules", ".bin", "buf")
	if _, err := os.Stat(bin); err != nil {
		out, err := exec.Command("npm", "ci", "--prefix", filepath.Join(root, "tools", "buf"), "--no-audit", "--no-fund").CombinedOutput()
		if err != nil {
			t.Fatalf("install buf (npm ci --prefix tools/buf): %v\n%s", err, out)
		}
	}
	return bin
}

// rivoraMethods is every rivora.v1 method, as buf curl names them.
func rivoraMethods(t *testing.T) []string {
	t.Helper()
	var methods []string
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if fd.Package() != "rivora.v1" {
			return true
		}
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				methods = append(methods, string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name()))
			}
		}
		return true
	})
	slices.Sort(methods)
	if len(methods) < 30 {
		t.Fatalf("found only %d rivora.v1 methods: the registry walk is broken", len(methods))
	}
	return methods
}

// The issue's command, with the token reflection needs: `buf curl
// --list-methods` over gRPC reflection lists every rivora.v1 method of
// `rivora dev`, and with no token it is refused.
func TestBufCurlListsEveryMethodOverReflection(t *testing.T) {
	buf := bufBin(t)
	d := startDev(t, devOptions{})
	token := readAdminToken(t, d.DataDir())
	list := func(args ...string) (string, error) {
		cmd := exec.Command(buf, append([]string{"curl", "--list-methods", "--protocol", "grpc", "--http2-prior-knowledge"}, append(args, d.URL())...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := list("--reflect-header", "Authorization: Bearer "+token)
	if err != nil {
		t.Fatalf("buf curl --list-methods: %v\n%s", err, out)
	}
	var got []string
	for _, line := range strings.Fields(out) {
		if strings.HasPrefix(line, "rivora.v1.") {
			got = append(got, line)
		}
	}
	slices.Sort(got)
	if want := rivoraMethods(t); !slices.Equal(got, want) {
		t.Fatalf("buf curl listed %d rivora.v1 methods:\n%s\nwant all %d: %v", len(got), out, len(want), want)
	}
	if out, err := list(); err == nil || !strings.Contains(out, "not authenticated") {
		t.Fatalf("buf curl --list-methods with no token: %v\n%s\nwant refused (unauthenticated)", err, out)
	}
	// The health check is described too, and its call needs no token
	// (only the reflection requests carry one).
	cmd := exec.Command(buf, "curl", "--protocol", "grpc", "--http2-prior-knowledge",
		"--reflect-header", "Authorization: Bearer "+token, d.URL()+"/grpc.health.v1.Health/Check")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), `"status": "SERVING"`) {
		t.Fatalf("buf curl grpc.health.v1.Health/Check: %v\n%s\nwant SERVING", err, out)
	}
}
