package testkit

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
)

// ParseGoFiles parses every Go file below root (node_modules, testdata
// and hidden directories skipped) whose path relative to root keep
// accepts, and hands each to visit; it returns how many it parsed. Tests
// that keep a rule about the code itself (function length, call sites)
// read the tree through it.
func ParseGoFiles(root string, keep func(rel string) bool, visit func(rel string, fset *token.FileSet, f *ast.File)) (int, error) {
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
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if !strings.HasSuffix(rel, ".go") || !keep(rel) {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		visit(rel, fset, f)
		return nil
	})
	return files, err
}
