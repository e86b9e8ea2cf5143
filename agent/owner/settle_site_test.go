package owner_test

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rivora/rivora/testkit"
)

// Attempts are settled in one place: of all the product code (tests
// aside), only owner's settle calls Scheduler.Settle. A second call site
// is a second way for one attempt to be settled twice or not at all.
func TestOneSettleCallSite(t *testing.T) {
	var sites []string
	product := func(rel string) bool { return !strings.HasSuffix(rel, "_test.go") }
	files, err := testkit.ParseGoFiles(filepath.Join("..", ".."), product, func(rel string, fset *token.FileSet, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Settle" {
				sites = append(sites, rel+":"+strconv.Itoa(fset.Position(call.Pos()).Line))
			}
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("found %d Go files; the test looks in the wrong place", files)
	}
	if len(sites) != 1 || !strings.HasPrefix(sites[0], "agent/owner/settle.go:") {
		t.Fatalf("Settle is called at %v; want exactly one call site, in agent/owner/settle.go", sites)
	}
}
