package testkit

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a test or benchmark function may be.
const maxFuncLines = 200

// kept reports whether path holds test or benchmark code: a _test.go
// file, the benchmarks (e2e/bench) or the kit itself.
func kept(path string) bool {
	path = filepath.ToSlash(path)
	return strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, "e2e/bench/") || strings.HasPrefix(path, "testkit/")
}

func TestNoLongTestFunctions(t *testing.T) {
	files, err := ParseGoFiles("..", kept, func(rel string, fset *token.FileSet, f *ast.File) {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			from, to := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
			if n := to - from + 1; n > maxFuncLines {
				t.Errorf("%s:%d: %s is %d lines; split it by its phases (at most %d)", rel, from, fd.Name.Name, n, maxFuncLines)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("found %d test files; the test looks in the wrong place", files)
	}
}
