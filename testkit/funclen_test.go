package testkit

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
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
	root := ".."
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "node_modules" || n == "testdata" || (strings.HasPrefix(n, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if !strings.HasSuffix(rel, ".go") || !kept(rel) {
			return nil
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
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
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("found %d test files; the test looks in the wrong place", files)
	}
}
