package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// `rivora edge` refuses bad input before anything starts, with an error
// naming the flag and what it wants: usage errors exit 2.
func TestEdgeFlagsRefused(t *testing.T) {
	base := func(extra ...string) []string {
		return append([]string{"rivora", "edge", "--name", "shop-1", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
			"--cell-leaf", "nats-leaf://127.0.0.1:7422", "--controlplane", "http://127.0.0.1:1"}, extra...)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		usage    bool // exit code 2 (a missing required flag is urfave's own error)
		mentions []string
	}{
		{"no name", []string{"rivora", "edge", "--cell-leaf", "nats-leaf://127.0.0.1:7422", "--controlplane", "http://127.0.0.1:1", "--insecure"}, false, []string{"name"}},
		{"no cell leaf", []string{"rivora", "edge", "--name", "shop-1", "--controlplane", "http://127.0.0.1:1", "--insecure"}, false, []string{"cell-leaf"}},
		{"bad name", []string{"rivora", "edge", "--name", "shop 1", "--cell-leaf", "nats-leaf://127.0.0.1:7422", "--controlplane", "http://127.0.0.1:1", "--insecure"}, true, []string{"--name"}},
		{"no cell token", base(), true, []string{"no cell token", "--cell-token-file", "--insecure"}},
		{"bad cell leaf", base("--insecure", "--cell-leaf", "http://127.0.0.1:7422"), true, []string{"--cell-leaf", "nats-leaf://HOST:PORT"}},
		{"cell leaf without port", base("--insecure", "--cell-leaf", "nats-leaf://cell.example"), true, []string{"--cell-leaf"}},
		{"bad control plane", base("--insecure", "--controlplane", "cp.example:7300"), true, []string{"--controlplane", "http://"}},
		{"bad size", base("--insecure", "--max-buffer", "lots"), true, []string{"--max-buffer", "512MiB"}},
		{"bad unit", base("--insecure", "--max-buffer", "10XB"), true, []string{"--max-buffer"}},
		{"negative size", base("--insecure", "--max-buffer", "-1GiB"), true, []string{"--max-buffer"}},
		{"overflowing size", base("--insecure", "--max-buffer", "99999999999TiB"), true, []string{"--max-buffer"}},
		{"tiny buffer", base("--insecure", "--max-buffer", "64KiB"), true, []string{"--max-buffer", "at least 1MiB"}},
		{"short max age", base("--insecure", "--buffer-max-age", "10s"), true, []string{"--buffer-max-age", "at least 1m"}},
		// Found once the store is open (JetStream's limit is three
		// quarters of the free disk), still a usage error.
		{"buffer over the disk", base("--insecure", "--max-buffer", "1048576TiB"), true, []string{"--max-buffer 1.0 EiB", "free", "give --max-buffer at most"}},
		{"bad max payload", base("--insecure", "--max-payload", "0"), true, []string{"--max-payload"}},
		{"arguments", base("--insecure", "extra"), true, []string{"takes no arguments"}},
	} {
		app := newApp()
		app.ExitErrHandler = func(*cli.Context, error) {} // the test reads the exit code
		err := app.Run(tc.args)
		if err == nil {
			t.Errorf("%s: started, want refused", tc.name)
			continue
		}
		var exit cli.ExitCoder
		if tc.usage && (!errors.As(err, &exit) || exit.ExitCode() != 2) {
			t.Errorf("%s: err %v, want a usage error (exit 2)", tc.name, err)
		}
		for _, m := range tc.mentions {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: refusal %q does not mention %q", tc.name, err, m)
			}
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"1073741824": 1 << 30, "512MiB": 512 << 20, "1GiB": 1 << 30, "10 GiB": 10 << 30, "64KiB": 64 << 10, "2TiB": 2 << 40,
		"5MB": 5e6, "1GB": 1e9, "100B": 100, "0": 0,
	} {
		got, err := parseBytes("max-buffer", in)
		if err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "1.5GiB", "1 gigabyte", "-5", "0x10"} {
		if _, err := parseBytes("max-buffer", in); err == nil {
			t.Errorf("parseBytes(%q) accepted", in)
		}
	}
}

// An edge serves none of the cell's internal services: its --help and
// its --insecure warning say what the cell token and TLS do on an edge,
// not on an agent.
func TestEdgeHelpIsAnEdges(t *testing.T) {
	var out strings.Builder
	app := newApp()
	app.Writer = &out
	if err := app.Run([]string{"rivora", "edge", "--help"}); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, want := range []string{"derives from it its credential on the cell's leaf port", "joins only a cell that runs with --insecure", "serve --listen (ingest, /healthz, /metrics) over HTTPS", "the leaf connection is TLS"} {
		if !strings.Contains(help, want) {
			t.Errorf("rivora edge --help lacks %q", want)
		}
	}
	for _, agents := range []string{"PartitionService", "NATS routes", "signing secrets"} {
		if strings.Contains(help, agents) {
			t.Errorf("rivora edge --help speaks of an agent's %q", agents)
		}
	}
	if w := insecureWarning("edge"); strings.Contains(w, "PartitionService") || !strings.Contains(w, "this edge presents no credential") {
		t.Errorf("the edge's --insecure warning: %q", w)
	}
	if w := insecureWarning("agent"); !strings.Contains(w, "PartitionService") {
		t.Errorf("the agent's --insecure warning: %q", w)
	}
}
