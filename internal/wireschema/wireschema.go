// Package wireschema checks messages against the protocol's JSON Schemas in
// docs/schema, for tests.
package wireschema

import (
	"bytes"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var (
	mu       sync.Mutex
	compiled = map[string]*jsonschema.Schema{}
)

// Dir is the directory holding the schemas.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "docs", "schema")
}

// Validate checks data against docs/schema/<name>.schema.json.
func Validate(name string, data []byte) error {
	mu.Lock()
	sch, ok := compiled[name]
	if !ok {
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		var err error
		sch, err = c.Compile(filepath.Join(Dir(), name+".schema.json"))
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
