package processor

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemas compiles responseSchema documents once and keeps them by digest.
type schemas struct {
	mu    sync.Mutex
	byKey map[[32]byte]*jsonschema.Schema
}

const maxCachedSchemas = 1024

func (s *schemas) compile(raw []byte) (*jsonschema.Schema, error) {
	key := sha256.Sum256(raw)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.byKey[key]; ok {
		return sch, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("responseSchema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("interlock:responseSchema", doc); err != nil {
		return nil, fmt.Errorf("responseSchema: %w", err)
	}
	sch, err := c.Compile("interlock:responseSchema")
	if err != nil {
		return nil, fmt.Errorf("responseSchema does not compile: %w", err)
	}
	if s.byKey == nil || len(s.byKey) >= maxCachedSchemas {
		s.byKey = make(map[[32]byte]*jsonschema.Schema)
	}
	s.byKey[key] = sch
	return sch, nil
}

// validate checks payload against the schema raw.
func (s *schemas) validate(raw, payload []byte) error {
	sch, err := s.compile(raw)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("payload is not JSON: %w", err)
	}
	return sch.Validate(inst)
}

var sharedSchemas schemas

// ValidatePayload checks payload against a responseSchema, as the
// coordinator will; the AG-UI bridge uses it to refuse a resume batch before
// anything changes.
func ValidatePayload(schema, payload []byte) error {
	return sharedSchemas.validate(schema, payload)
}
