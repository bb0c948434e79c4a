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
//   - A regular expression (pattern, patternProperties) whose compiled
//     program is large is refused, one by one and all together, so neither
//     compiling a schema nor checking an answer against it multiplies.
//   - Compiling happens once per schema, outside any lock other decisions
//     wait for.
//   - A check runs under a time budget: an answer that takes longer is
//     refused. Only that answer is: the next one, from anyone, is checked.
//     At most MaxChecks checks run at once, so checks abandoned at the
//     budget cannot pile up; a check that finds no slot within the budget
//     is refused too.
//   - Errors name the rule and where it failed, never the value: an answer
//     may be a credential, and so may an object key in it, so a location
//     names only the schema's declared properties and array indexes (any
//     other key is *).
package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/interlockhq/interlock/subjects"
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
	// MaxPatternSize bounds the compiled program (regexp/syntax
	// instructions) of one regular expression; MaxPatternsSize bounds them
	// all together.
	MaxPatternSize  = 1024
	MaxPatternsSize = 4096
	// DefaultBudget is the time a check may take.
	DefaultBudget = 250 * time.Millisecond
	// MaxChecks bounds the checks running at once, abandoned ones included.
	MaxChecks = 8
)

// Cache compiles schemas once and keeps them by digest. The zero value is
// ready to use, with DefaultBudget.
type Cache struct {
	// Budget bounds one check; zero means DefaultBudget.
	Budget time.Duration
	mu     sync.Mutex
	byKey  map[[32]byte]*entry
	// slots holds a token per check under way.
	slots chan struct{}
	// check, in tests, replaces the check of a payload against a compiled
	// schema (a check that blocks until the test lets it end).
	check func(*jsonschema.Schema, any) error
}

// entry is a schema compiled, or being compiled: ready is closed once sch,
// props and err are set.
type entry struct {
	ready chan struct{}
	sch   *jsonschema.Schema
	props map[string]bool // names declared under properties
	err   error
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
	e, found := c.byKey[key]
	if !found {
		e = &entry{ready: make(chan struct{})}
		if c.byKey == nil || len(c.byKey) >= maxCached {
			c.byKey = make(map[[32]byte]*entry)
		}
		c.byKey[key] = e
	}
	c.mu.Unlock()
	if found {
		<-e.ready
		return e, e.err
	}
	// Compiled by the first caller, outside the lock: checks against other
	// schemas go on meanwhile; callers with the same schema wait for it.
	e.sch, e.props, e.err = compile(raw)
	close(e.ready)
	return e, e.err
}

// acquire takes a check slot, giving up when timeout fires.
func (c *Cache) acquire(timeout <-chan time.Time) bool {
	c.mu.Lock()
	if c.slots == nil {
		c.slots = make(chan struct{}, MaxChecks)
	}
	slots := c.slots
	c.mu.Unlock()
	select {
	case slots <- struct{}{}:
		return true
	case <-timeout:
		return false
	}
}

func (c *Cache) release() { <-c.slots }

// Validate checks payload against the schema raw. Errors match ErrUnsafe,
// ErrInvalid, ErrMismatch (saying which rule failed where) or ErrBudget;
// none contains the payload.
func (c *Cache) Validate(raw, payload []byte) error {
	e, err := c.entry(raw)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("%w: the payload is not JSON", ErrMismatch)
	}
	// The check runs on its own goroutine so the caller is back at the
	// budget; an abandoned check runs to its end (bounded by the schema
	// limits and the payload's size) with nobody waiting for it, holding
	// its slot until then.
	start := time.Now()
	timer := time.NewTimer(c.budget())
	defer timer.Stop()
	if !c.acquire(timer.C) {
		return fmt.Errorf("%w: %d checks were already under way for %v", ErrBudget, MaxChecks, c.budget())
	}
	check := (*jsonschema.Schema).Validate
	if c.check != nil {
		check = c.check
	}
	done := make(chan error, 1)
	go func() {
		defer c.release()
		done <- check(e.sch, inst)
	}()
	select {
	case err = <-done:
	case <-timer.C:
	}
	if time.Since(start) > c.budget() {
		return fmt.Errorf("%w: more than %v", ErrBudget, c.budget())
	}
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return fmt.Errorf("%w: %s", ErrMismatch, describe(ve, inst, e.props))
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
func describe(ve *jsonschema.ValidationError, inst any, props map[string]bool) string {
	var leaves []string
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, leaf(e, inst, props))
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

func leaf(e *jsonschema.ValidationError, inst any, props map[string]bool) string {
	at := location(e.InstanceLocation, inst, props)
	kw := e.ErrorKind.KeywordPath()
	rule := "schema"
	if len(kw) > 0 {
		rule = kw[len(kw)-1]
	}
	_, frag, _ := strings.Cut(e.SchemaURL, "#")
	return fmt.Sprintf("at %s the payload fails %q (schema #%s)", at, rule, strings.TrimSuffix(frag+"/"+strings.Join(kw, "/"), "/"))
}

// location is the JSON pointer loc into inst, with every object key that
// is not a declared property name replaced by *: keys are part of the
// answer.
func location(loc []string, inst any, props map[string]bool) string {
	var b strings.Builder
	v := inst
	for _, tok := range loc {
		b.WriteString("/")
		switch x := v.(type) {
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				b.WriteString("*")
				v = nil
				continue
			}
			b.WriteString(strconv.Itoa(i))
			v = x[i]
		case map[string]any:
			if props[tok] {
				b.WriteString(escape(tok))
			} else {
				b.WriteString("*")
			}
			v = x[tok]
		default:
			b.WriteString("*")
			v = nil
		}
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

// refuseLoader loads nothing.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%w: %s is outside the schema; nothing is loaded", ErrUnsafe, url)
}

const resource = "urn:interlock:responseSchema"

// compile returns the compiled schema and the names it declares under
// properties.
func compile(raw []byte) (*jsonschema.Schema, map[string]bool, error) {
	if len(raw) > MaxSize {
		return nil, nil, fmt.Errorf("%w: %d bytes, over the limit of %d", ErrUnsafe, len(raw), MaxSize)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: not JSON: %v", ErrInvalid, err)
	}
	props, err := inspect(doc)
	if err != nil {
		return nil, nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(resource, doc); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	sch, err := c.Compile(resource)
	if errors.Is(err, ErrUnsafe) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return sch, props, nil
}

// CheckAnswer applies the responseSchema rule to an answer: a resolve of an
// interrupt with a responseSchema needs a payload (absent when empty) that
// satisfies it; a cancel, or an interrupt without a schema, needs nothing.
// Errors match ErrMismatch, ErrBudget or ErrUnsafe and never contain the
// payload.
func (c *Cache) CheckAnswer(in subjects.Interrupt, status subjects.Status, payload json.RawMessage) error {
	if status != subjects.StatusResolved || len(in.ResponseSchema) == 0 {
		return nil
	}
	if len(payload) == 0 {
		return fmt.Errorf("%w: interrupt %s has a responseSchema; a resolve needs a payload", ErrMismatch, in.ID)
	}
	return c.Validate(in.ResponseSchema, payload)
}
