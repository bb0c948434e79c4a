// Package wireschema checks messages against the protocol's JSON Schemas in
// docs/schema, for tests.
package wireschema

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// BaseURL is the base of every schema's $id: each file's $id is BaseURL
// plus its file name, so the relative $refs between them resolve as
// published, in any validator.
const BaseURL = "https://github.com/interlockhq/interlock/docs/schema/"

var (
	mu       sync.Mutex
	compiler *jsonschema.Compiler
	compiled = map[string]*jsonschema.Schema{}
)

// Dir is the directory holding the schemas.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "docs", "schema")
}

// noLoader refuses every URL: the schemas refer only to one another, and
// all of them are added as resources up front.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema %s is not one of docs/schema: nothing is loaded from outside", url)
}

// newCompiler adds every schema of Dir under its $id, which must be BaseURL
// plus its file name.
func newCompiler() (*jsonschema.Compiler, error) {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseLoader(noLoader{})
	files, err := filepath.Glob(filepath.Join(Dir(), "*.schema.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("no schemas in " + Dir())
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		want := BaseURL + filepath.Base(f)
		if m, _ := doc.(map[string]any); m == nil || m["$id"] != want {
			return nil, fmt.Errorf("%s: $id must be %q", f, want)
		}
		if err := c.AddResource(want, doc); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	return c, nil
}

// Validate checks data against docs/schema/<name>.schema.json.
func Validate(name string, data []byte) error {
	mu.Lock()
	sch, ok := compiled[name]
	if !ok {
		var err error
		if compiler == nil {
			if compiler, err = newCompiler(); err != nil {
				mu.Unlock()
				return err
			}
		}
		sch, err = compiler.Compile(BaseURL + name + ".schema.json")
		if err != nil {
			mu.Unlock()
			return fmt.Errorf("compile schema %s: %w", name, err)
		}
		compiled[name] = sch
	}
	mu.Unlock()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: not JSON: %w", name, err)
	}
	if err := sch.Validate(inst); err != nil {
		return fmt.Errorf("%s: %s: %w", name, data, err)
	}
	return nil
}
