package subjects_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDocListsEveryKind: the package doc shows a subject of every Kind
// constant declared in the package.
func TestDocListsEveryKind(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	var kinds []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || len(vs.Values) != 1 {
				return true
			}
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Kind" {
				return true
			}
			if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
				k, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				if k != "*" {
					kinds = append(kinds, k)
				}
			}
			return true
		})
	}
	require.GreaterOrEqual(t, len(kinds), 15)
	for _, k := range kinds {
		assert.Contains(t, string(doc), "<prefix>."+k+".", "the package doc lists no %s subject", k)
	}
}
