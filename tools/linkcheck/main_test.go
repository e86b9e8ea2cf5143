package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSlug(t *testing.T) {
	for text, want := range map[string]string{
		"Security":                           "security",
		"Where webhooks may go (SSRF guard)": "where-webhooks-may-go-ssrf-guard",
		"Metrics (Prometheus)":               "metrics-prometheus",
		"Design notes: where the code refines the design card": "design-notes-where-the-code-refines-the-design-card",
		"The `agent` root package":                             "the-agent-root-package",
		"A 60-second tour":                                     "a-60-second-tour",
		"See [the cell](cell.md)":                              "see-the-cell",
	} {
		if got := slug(text); got != want {
			t.Errorf("slug(%q) = %q, want %q", text, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("docs/b.md", "# B\n\n## Roles\n\n## Roles\n")
	a := write("a.md", "# A\n\n"+
		"[ok](docs/b.md) [ok](docs/b.md#roles) [ok](docs/b.md#roles-1) [ok](#a) [ok](docs/)\n"+
		"[web](https://example.com/x) [mail](mailto:x@example.com) `[code](nowhere.md)`\n"+
		"```\n[fenced](nowhere.md)\n```\n"+
		"[gone](docs/c.md)\n"+
		"[bad anchor](docs/b.md#tokens)\n"+
		"[bad self](#nowhere)\n")
	links, err := linksIn(a)
	if err != nil {
		t.Fatal(err)
	}
	var broken []int
	for _, l := range links {
		if check(l) != "" {
			broken = append(broken, l.line)
		}
	}
	want := []int{8, 9, 10}
	if len(broken) != len(want) {
		t.Fatalf("broken links on lines %v, want %v", broken, want)
	}
	for i := range want {
		if broken[i] != want[i] {
			t.Fatalf("broken links on lines %v, want %v", broken, want)
		}
	}
}
