package s3task

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExportedNamesDocumented fails on an exported identifier of a public
// package of the repository (types, functions, methods, constants,
// variables, struct fields and interface methods) without a doc comment: a
// user reads the API in go doc, and a name without a word there is a
// question for the maintainers.
func TestExportedNamesDocumented(t *testing.T) {
	dirs := []string{".", "s3event", "s3tasktest", "mems3", "s3taskotel", "s3tasknats", "s3tasklambda"}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, e := range entries {
			name := filepath.Join(dir, e.Name())
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			for _, miss := range undocumented(f) {
				t.Errorf("%s:%d: exported %s has no doc comment", filepath.ToSlash(name), fset.Position(miss.pos).Line, miss.what)
			}
		}
	}
}

type missing struct {
	pos  token.Pos
	what string
}

// undocumented lists the exported declarations of f without a doc comment.
// A name in a group (const, var, type block) counts as documented by the
// group's comment or its own; a struct field or interface method by its own
// comment, above or at the end of its line, or by that of the fields
// declared with it.
func undocumented(f *ast.File) []missing {
	var out []missing
	has := func(groups ...*ast.CommentGroup) bool {
		for _, g := range groups {
			if g != nil && strings.TrimSpace(g.Text()) != "" {
				return true
			}
		}
		return false
	}
	fields := func(owner string, list *ast.FieldList) {
		if list == nil {
			return
		}
		for _, fld := range list.List {
			for _, n := range fld.Names {
				if n.IsExported() && !has(fld.Doc, fld.Comment) {
					out = append(out, missing{n.Pos(), "field " + owner + "." + n.Name})
				}
			}
		}
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || !has(d.Doc) {
				if d.Name.IsExported() && receiverExported(d) {
					out = append(out, missing{d.Pos(), "func " + d.Name.Name})
				}
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					if !has(d.Doc, s.Doc, s.Comment) {
						out = append(out, missing{s.Pos(), "type " + s.Name.Name})
					}
					switch tt := s.Type.(type) {
					case *ast.StructType:
						fields(s.Name.Name, tt.Fields)
					case *ast.InterfaceType:
						fields(s.Name.Name, tt.Methods)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() && !has(d.Doc, s.Doc, s.Comment) {
							out = append(out, missing{n.Pos(), "name " + n.Name})
						}
					}
				}
			}
		}
	}
	return out
}

// receiverExported reports whether a method's receiver type is exported
// (methods of unexported types do not show in go doc); true for a function.
func receiverExported(d *ast.FuncDecl) bool {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return true
	}
	typ := d.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
		case *ast.IndexExpr:
			typ = x.X
		case *ast.IndexListExpr:
			typ = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return true
		}
	}
}
