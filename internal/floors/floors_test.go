// Package floors_test keeps the dependency floors true: a client SDK
// imports no server code, the API imports nothing of ours, and the agent
// and the control plane share only proto and small packages below them
// both; the test kit (testkit/) sits above everything and only tests,
// e2e and the benchmarks import it. It fails when a package depends
// (directly or not, test files left out) on one it must not.
package floors_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/rivora/rivora/"

// rule: no package under from may depend on a package under any of
// forbidden, but for the pairs in except (from package → dependency).
type rule struct {
	from      string
	forbidden []string
	except    map[string]string
	why       string
}

var rules = []rule{
	{from: "sdk", forbidden: []string{"internal", "lanes", "agent", "controlplane", "server", "cli", "cmd", "console", "e2e", "testkit"},
		why: "the customer SDK imports no server code (it may become its own module)"},
	{from: "proto", forbidden: []string{"internal", "lanes", "agent", "controlplane", "server", "cli", "cmd", "sdk", "console", "e2e", "testkit"},
		why: "the API imports nothing of ours"},
	{from: "agent", forbidden: []string{"controlplane", "server", "cli", "cmd", "testkit"},
		why: "the agent never imports the control plane"},
	{from: "controlplane", forbidden: []string{"agent", "server", "cli", "cmd", "testkit"},
		why: "the control plane never imports the agent"},
	{from: "lanes", forbidden: []string{"agent", "controlplane", "server", "cli", "cmd", "sdk", "console", "e2e", "testkit"},
		why: "the lane vocabulary both sides share sits below them both"},
	{from: "agent/limits", forbidden: []string{ours},
		why: "limits and classes are a leaf: they import nothing of ours"},
	{from: "internal/limitbounds", forbidden: []string{ours},
		why: "the limits' bounds, shared by the CLI and the control plane, are a leaf"},
	{from: "internal/rates", forbidden: []string{ours},
		why: "rates, shared by the CLI and the control plane, are a leaf"},
	{from: "agent/destinations", forbidden: []string{"agent/scheduler"},
		why: "a destination's config (and the HTTP sender under it) does not pull in the scheduler"},
	{from: "internal", forbidden: []string{"lanes", "agent", "controlplane", "server", "cli", "cmd", "testkit"},
		why: "the ground floor imports nothing above it"},
	{from: "server", forbidden: []string{"cmd", "cli", "e2e", "testkit"},
		why: "the server wires what sits below it; the commands sit above it"},
	{from: "cli", forbidden: []string{"testkit"}, why: "the test kit is imported by tests only"},
	{from: "cmd", forbidden: []string{"testkit"}, why: "the test kit is imported by tests only"},
}

// deps lists every package of the module with its dependencies (of the
// module, transitive), relative to the module path.
func deps(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	all := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], module) {
			continue
		}
		pkg := strings.TrimPrefix(fields[0], module)
		for _, d := range fields[1:] {
			if strings.HasPrefix(d, module) {
				all[pkg] = append(all[pkg], strings.TrimPrefix(d, module))
			}
		}
	}
	return all
}

// ours, as a forbidden dir, stands for every package of the module.
const ours = "*"

func under(pkg, dir string) bool {
	return dir == ours || pkg == dir || strings.HasPrefix(pkg, dir+"/")
}

func TestDependencyFloors(t *testing.T) {
	all := deps(t)
	if len(all) < 20 {
		t.Fatalf("go list found %d packages of the module; the test looks in the wrong place", len(all))
	}
	for _, r := range rules {
		for pkg, ds := range all {
			if !under(pkg, r.from) {
				continue
			}
			for _, d := range ds {
				for _, f := range r.forbidden {
					if !under(d, f) {
						continue
					}
					if allowed, ok := r.except[pkg]; ok && (allowed == "*" || allowed == d) {
						continue
					}
					if allowed, ok := r.except[r.from]; ok && allowed == d {
						continue
					}
					t.Errorf("%s depends on %s: %s", pkg, d, r.why)
				}
			}
		}
	}
}
