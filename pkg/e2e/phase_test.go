package e2e

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryTestHasAPhase: every lab test begins with alone(t) or
// parallel(t), so that make test's two phases (DLB_E2E_PHASE) run each
// exactly once, and a test that measures timings never runs beside the
// other packages' tests by omission.
func TestEveryTestHasAPhase(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" ||
				fn.Name.Name == "TestEveryTestHasAPhase" {
				continue
			}
			seen++
			if len(fn.Body.List) == 0 || !callsPhase(fn.Body.List[0]) {
				t.Errorf("%s: %s does not begin with alone(t) or parallel(t)", f, fn.Name.Name)
			}
		}
	}
	if seen < 10 {
		t.Errorf("found only %d tests in %v", seen, files)
	}
}

// callsPhase reports whether a statement is alone(t) or parallel(t).
func callsPhase(s ast.Stmt) bool {
	e, ok := s.(*ast.ExprStmt)
	if !ok {
		return false
	}
	c, ok := e.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	id, ok := c.Fun.(*ast.Ident)
	return ok && (id.Name == "alone" || id.Name == "parallel") && len(c.Args) == 1
}
