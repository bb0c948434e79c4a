package wireschema

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/interlockhq/interlock/internal/e2e"
)

// TestEverySchemaCompilesByID compiles each schema by its $id alone, with
// no file loader, as a validator reading the published files would.
func TestEverySchemaCompilesByID(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(Dir(), "*.schema.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schemas: %v", err)
	}
	c, err := newCompiler()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := c.Compile(BaseURL + filepath.Base(f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestConformanceMessagesMatchSchemas checks that every valid message of
// the conformance vectors satisfies its schema.
func TestConformanceMessagesMatchSchemas(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(Dir(), "..", "..", "testdata", "conformance", "messages.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vec struct {
		Cases []struct {
			Kind, Name string
			Message    json.RawMessage
			Code       *string
		}
	}
	if err := json.Unmarshal(data, &vec); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range vec.Cases {
		if c.Code != nil || len(c.Message) == 0 || strings.Contains(c.Name, "without version") {
			continue
		}
		n++
		if err := Validate(c.Kind, c.Message); err != nil {
			t.Errorf("%s %q: %v", c.Kind, c.Name, err)
		}
	}
	if n < 10 {
		t.Fatalf("only %d valid messages checked", n)
	}
}

// TestSchemasCompileUnderAjv runs e2e/schemas.mjs: every schema compiles
// under ajv by its $id, and the valid conformance messages satisfy them.
func TestSchemasCompileUnderAjv(t *testing.T) {
	node := e2e.Require(t, false, "ajv", "ajv-formats")
	out, err := exec.Command(node, filepath.Join(e2e.Dir(), "schemas.mjs")).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("%s", out)
}
