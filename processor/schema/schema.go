// Package schema compiles responseSchema documents and checks answers
// against them. A schema comes from an agent and an answer from a person;
// both are treated as hostile:
//
//   - Nothing is loaded while compiling: no file, no network. A schema that
//     refers to anything outside itself ($ref, $dynamicRef or $schema naming
//     another document, $id) is refused, as is one that refers to itself.
//   - Size, nesting depth, combinators (allOf, anyOf, oneOf, not, if/then/
//     else) and the schema's size with every $ref expanded are bounded, so
//     no small schema multiplies into an expensive one.
//   - A check runs under a time budget: an answer that takes longer is
//     refused, and so is every later answer to the same schema, without
//     running it again.
//   - Errors name the rule and where it failed, never the value: an answer
//     may be a credential.
package schema

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var (
	// ErrUnsafe: the schema breaks a rule of this package (something
	// external, a cycle, a limit).
	ErrUnsafe = errors.New("responseSchema refused")
	// ErrInvalid: the schema is not a valid JSON Schema.
	ErrInvalid = errors.New("responseSchema is not a valid JSON Schema")
	// ErrMismatch: the payload does not satisfy the schema.
	ErrMismatch = errors.New("payload does not satisfy responseSchema")
	// ErrBudget: checking the payload took longer than the budget.
	ErrBudget = errors.New("checking the payload against responseSchema took too long")
)

// Limits on a responseSchema.
const (
	MaxSize        = 32 << 10
	MaxDepth       = 32
	MaxCombinators = 64
	// MaxExpanded bounds the subschemas of a schema with every $ref
	// replaced by what it names.
	MaxExpanded = 2000
	// DefaultBudget is the time a check may take.
	DefaultBudget = 250 * time.Millisecond
)

// Cache compiles schemas once and keeps them by digest. The zero value is
// ready to use, with DefaultBudget.
type Cache struct {
	// Budget bounds one check; zero means DefaultBudget.
	Budget time.Duration
	mu     sync.Mutex
	byKey  map[[32]byte]*entry
}

type entry struct {
	sch *jsonschema.Schema
	err error
	// overBudget: a check against this schema ran out of time; every later
	// one is refused at once.
	overBudget bool
}

const maxCached = 1024

// Compile checks and compiles a schema. Errors match ErrUnsafe or
// ErrInvalid.
func (c *Cache) Compile(raw []byte) error {
	_, err := c.entry(raw)
	return err
}

func (c *Cache) entry(raw []byte) (*entry, error) {
	key := sha256.Sum256(raw)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		return e, e.err
	}
	sch, err := compile(raw)
	e := &entry{sch: sch, err: err}
	if c.byKey == nil || len(c.byKey) >= maxCached {
		c.byKey = make(map[[32]byte]*entry)
	}
	c.byKey[key] = e
	return e, err
}

// Validate checks payload against the schema raw. Errors match ErrUnsafe,
// ErrInvalid, ErrMismatch (saying which rule failed where) or ErrBudget;
// none contains the payload.
func (c *Cache) Validate(raw, payload []byte) error {
	e, err := c.entry(raw)
	if err != nil {
		return err
	}
	c.mu.Lock()
	over := e.overBudget
	c.mu.Unlock()
	if over {
		return fmt.Errorf("%w: an earlier answer to this schema took longer than %v; it is refused without a check", ErrBudget, c.budget())
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("%w: the payload is not JSON", ErrMismatch)
	}
	// The check runs on its own goroutine so the caller is back at the
	// budget; an abandoned check runs to its end (bounded by the schema
	// limits and the payload's size) with nobody waiting for it.
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- e.sch.Validate(inst) }()
	timer := time.NewTimer(c.budget())
	defer timer.Stop()
	select {
	case err = <-done:
	case <-timer.C:
	}
	if time.Since(start) > c.budget() {
		c.mu.Lock()
		e.overBudget = true
		c.mu.Unlock()
		return fmt.Errorf("%w: more than %v", ErrBudget, c.budget())
	}
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return fmt.Errorf("%w: %s", ErrMismatch, describe(ve))
	}
	if err != nil {
		return fmt.Errorf("%w: %T", ErrMismatch, err)
	}
	return nil
}

func (c *Cache) budget() time.Duration {
	if c.Budget > 0 {
		return c.Budget
	}
	return DefaultBudget
}

// describe names the rules that failed and where: the payload location
// and the keyword's place in the schema, never a value.
func describe(ve *jsonschema.ValidationError) string {
	var leaves []string
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, leaf(e))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	const show = 3
	out := strings.Join(leaves[:min(len(leaves), show)], "; ")
	if len(leaves) > show {
		out += fmt.Sprintf("; and %d more", len(leaves)-show)
	}
	return out
}

func leaf(e *jsonschema.ValidationError) string {
	at := "/" + strings.Join(e.InstanceLocation, "/")
	kw := e.ErrorKind.KeywordPath()
	rule := "schema"
	if len(kw) > 0 {
		rule = kw[len(kw)-1]
	}
	_, frag, _ := strings.Cut(e.SchemaURL, "#")
	return fmt.Sprintf("at %s the payload fails %q (schema #%s)", at, rule, strings.TrimSuffix(frag+"/"+strings.Join(kw, "/"), "/"))
}

// refuseLoader loads nothing.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%w: %s is outside the schema; nothing is loaded", ErrUnsafe, url)
}

const resource = "urn:interlock:responseSchema"

func compile(raw []byte) (*jsonschema.Schema, error) {
	if len(raw) > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes, over the limit of %d", ErrUnsafe, len(raw), MaxSize)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrInvalid, err)
	}
	if err := inspect(doc); err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(resource, doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	sch, err := c.Compile(resource)
	if errors.Is(err, ErrUnsafe) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return sch, nil
}
