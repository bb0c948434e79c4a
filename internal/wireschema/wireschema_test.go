package wireschema

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/interlockhq/interlock/internal/e2e"
	"github.com/interlockhq/interlock/subjects"
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
// under ajv's strict mode (with ajv-formats) by its $id, and the valid
// conformance messages satisfy them.
func TestSchemasCompileUnderAjv(t *testing.T) {
	node := e2e.Require(t, false, "ajv", "ajv-formats")
	out, err := exec.Command(node, filepath.Join(e2e.Dir(), "schemas.mjs")).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("%s", out)
}

// TestSchemasNameEveryGoField: every JSON field the Go types send is a
// property of its schema (each schema allows no others), so a message the
// server sends validates; the pending entry's sensitive flag included.
func TestSchemasNameEveryGoField(t *testing.T) {
	types := map[string]reflect.Type{
		"chat-post-reply":   reflect.TypeFor[subjects.ChatPostReply](),
		"chat-post-request": reflect.TypeFor[subjects.ChatPostRequest](),
		"completion":        reflect.TypeFor[subjects.Completion](),
		"decision":          reflect.TypeFor[subjects.Decision](),
		"event":             reflect.TypeFor[subjects.Event](),
		"failure":           reflect.TypeFor[subjects.Failure](),
		"interrupt":         reflect.TypeFor[subjects.Interrupt](),
		"link-reply":        reflect.TypeFor[subjects.LinkReply](),
		"link-request":      reflect.TypeFor[subjects.LinkRequest](),
		"notice":            reflect.TypeFor[subjects.Notice](),
		"pending":           reflect.TypeFor[subjects.PendingInterrupt](),
		"run":               reflect.TypeFor[subjects.Run](),
		"suspension":        reflect.TypeFor[subjects.Suspension](),
		"timer":             reflect.TypeFor[subjects.Timer](),
		"verdict":           reflect.TypeFor[subjects.Verdict](),
		"work":              reflect.TypeFor[subjects.Work](),
	}
	for name, typ := range types {
		data, err := os.ReadFile(filepath.Join(Dir(), name+".schema.json"))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Properties map[string]json.RawMessage
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		for _, field := range jsonFields(typ) {
			if _, ok := doc.Properties[field]; !ok {
				t.Errorf("%s.schema.json has no property %q, which %s sends", name, field, typ)
			}
		}
	}
	// A run record's interrupts.
	data, err := os.ReadFile(filepath.Join(Dir(), "run.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var run struct {
		Properties struct {
			Interrupts struct {
				Items struct{ Properties map[string]json.RawMessage }
			}
		}
	}
	if err := json.Unmarshal(data, &run); err != nil {
		t.Fatal(err)
	}
	for _, field := range jsonFields(reflect.TypeFor[subjects.InterruptState]()) {
		if _, ok := run.Properties.Interrupts.Items.Properties[field]; !ok {
			t.Errorf("run.schema.json's interrupts have no property %q, which subjects.InterruptState sends", field)
		}
	}
	p := subjects.PendingInterrupt{RunID: "r1", Agent: "a", InterruptState: subjects.InterruptState{
		Interrupt: subjects.Interrupt{ID: "int-1", Reason: "input_required", Sensitive: new(bool)}}}
	data, err = json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate("pending", data); err != nil {
		t.Errorf("a sensitive pending entry: %v", err)
	}
}

// jsonFields lists the JSON names of t's fields, those of embedded
// structs inlined, as encoding/json marshals them.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}
