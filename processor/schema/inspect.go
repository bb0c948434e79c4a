package schema

import (
	"fmt"
	"net/url"
	"regexp/syntax"
	"strconv"
	"strings"
)

// metaschemas are the $schema values a responseSchema may name: the JSON
// Schema drafts, which are built in and never loaded.
var metaschemas = map[string]bool{
	"https://json-schema.org/draft/2020-12/schema": true,
	"https://json-schema.org/draft/2019-09/schema": true,
	"http://json-schema.org/draft-07/schema#":      true,
	"http://json-schema.org/draft-07/schema":       true,
}

// Keywords whose value is a schema, a list of schemas, or an object of
// schemas (by name).
var (
	oneSchema = map[string]bool{"additionalProperties": true, "items": true, "contains": true, "propertyNames": true,
		"unevaluatedItems": true, "unevaluatedProperties": true, "not": true, "if": true, "then": true, "else": true,
		"additionalItems": true}
	listOfSchemas   = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true, "items": true}
	schemasByName   = map[string]bool{"properties": true, "patternProperties": true, "dependentSchemas": true, "$defs": true, "definitions": true, "dependencies": true}
	combinators     = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "not": true, "if": true, "then": true, "else": true}
	refKeywords     = map[string]bool{"$ref": true, "$dynamicRef": true, "$recursiveRef": true}
	anchorKeywords  = map[string]bool{"$anchor": true, "$dynamicAnchor": true}
	definitionsOnly = map[string]bool{"$defs": true, "definitions": true}
)

// inspector walks a schema document, checking its rules.
type inspector struct {
	root        any
	combinators int
	anchors     map[string]string // anchor name -> JSON pointer
	expanded    map[string]int    // JSON pointer -> size with refs expanded
	onStack     map[string]bool
	props       map[string]bool // names declared under properties
	patterns    int             // regexp instructions of every pattern so far
}

// inspect refuses what this package does not compile: anything external,
// cycles, and schemas over the limits. It returns the names the schema
// declares under properties.
func inspect(doc any) (map[string]bool, error) {
	in := &inspector{root: doc, anchors: map[string]string{}, expanded: map[string]int{}, onStack: map[string]bool{},
		props: map[string]bool{}}
	if _, ok := doc.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: a responseSchema is a JSON object", ErrUnsafe)
	}
	if err := in.walk(doc, "", 0); err != nil {
		return nil, err
	}
	if in.combinators > MaxCombinators {
		return nil, fmt.Errorf("%w: %d subschemas under allOf, anyOf, oneOf, not and if/then/else, over the limit of %d",
			ErrUnsafe, in.combinators, MaxCombinators)
	}
	n, err := in.expand("")
	if err != nil {
		return nil, err
	}
	if n > MaxExpanded {
		return nil, fmt.Errorf("%w: with every $ref expanded it has over %d subschemas (limit %d)", ErrUnsafe, n, MaxExpanded)
	}
	return in.props, nil
}

// pattern refuses a regular expression whose compiled program is over
// MaxPatternSize instructions, or takes the schema's patterns over
// MaxPatternsSize. One that does not parse is left to the compiler, which
// refuses it as invalid.
func (in *inspector) pattern(expr, ptr string) error {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil
	}
	n := len(prog.Inst)
	if n > MaxPatternSize {
		return fmt.Errorf("%w: the regular expression at #%s compiles to %d instructions, over the limit of %d",
			ErrUnsafe, ptr, n, MaxPatternSize)
	}
	in.patterns += n
	if in.patterns > MaxPatternsSize {
		return fmt.Errorf("%w: its regular expressions compile to over %d instructions together (limit %d)",
			ErrUnsafe, MaxPatternsSize, MaxPatternsSize)
	}
	return nil
}

// walk checks depth, counts combinators, checks every reference is local
// and records anchors. ptr is the JSON pointer of v.
func (in *inspector) walk(v any, ptr string, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("%w: nested deeper than %d at #%s", ErrUnsafe, MaxDepth, ptr)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil // true/false, or a value under a keyword that takes none
	}
	for k, val := range obj {
		at := ptr + "/" + escape(k)
		switch {
		case k == "$id" || k == "id":
			if _, isString := val.(string); isString {
				return fmt.Errorf("%w: %s at #%s: a responseSchema is one document, with no identifiers of its own", ErrUnsafe, k, ptr)
			}
		case k == "$schema":
			if s, _ := val.(string); !metaschemas[s] {
				return fmt.Errorf("%w: $schema at #%s names a document that is not a JSON Schema draft; nothing is loaded", ErrUnsafe, ptr)
			}
		case refKeywords[k]:
			s, _ := val.(string)
			if !strings.HasPrefix(s, "#") {
				return fmt.Errorf("%w: %s at #%s refers outside the schema; only local references (#...) are allowed", ErrUnsafe, k, ptr)
			}
		case k == "pattern":
			if s, isString := val.(string); isString {
				if err := in.pattern(s, at); err != nil {
					return err
				}
			}
		case anchorKeywords[k]:
			if s, isString := val.(string); isString {
				in.anchors[s] = ptr
			}
		case listOfSchemas[k]:
			if list, isList := val.([]any); isList {
				if combinators[k] {
					in.combinators += len(list)
				}
				for i, s := range list {
					if err := in.walk(s, at+"/"+strconv.Itoa(i), depth+1); err != nil {
						return err
					}
				}
				continue
			}
			fallthrough
		case oneSchema[k]:
			if combinators[k] {
				in.combinators++
			}
			if err := in.walk(val, at, depth+1); err != nil {
				return err
			}
		case schemasByName[k]:
			byName, _ := val.(map[string]any)
			for name, s := range byName {
				switch k {
				case "properties":
					in.props[name] = true
				case "patternProperties":
					if err := in.pattern(name, at+"/"+escape(name)); err != nil {
						return err
					}
				}
				if err := in.walk(s, at+"/"+escape(name), depth+1); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// expand returns the number of subschemas of the schema at ptr with every
// reference replaced by its target, refusing cycles.
func (in *inspector) expand(ptr string) (int, error) {
	if n, ok := in.expanded[ptr]; ok {
		return n, nil
	}
	if in.onStack[ptr] {
		return 0, fmt.Errorf("%w: #%s refers back to itself; recursive schemas are not allowed", ErrUnsafe, ptr)
	}
	in.onStack[ptr] = true
	defer delete(in.onStack, ptr)
	obj, ok := in.at(ptr).(map[string]any)
	if !ok {
		in.expanded[ptr] = 1
		return 1, nil
	}
	n := 1
	add := func(child string) error {
		m, err := in.expand(child)
		n += m
		if n > MaxExpanded {
			return fmt.Errorf("%w: with every $ref expanded it has over %d subschemas (limit %d)", ErrUnsafe, MaxExpanded, MaxExpanded)
		}
		return err
	}
	for k, val := range obj {
		at := ptr + "/" + escape(k)
		var err error
		switch {
		case refKeywords[k]:
			target, ok := in.resolve(val.(string))
			if !ok {
				return 0, fmt.Errorf("%w: %s at #%s names nothing in the schema", ErrUnsafe, k, ptr)
			}
			err = add(target)
		case listOfSchemas[k]:
			if list, isList := val.([]any); isList {
				for i := range list {
					if err = add(at + "/" + strconv.Itoa(i)); err != nil {
						break
					}
				}
				break
			}
			err = add(at)
		case oneSchema[k]:
			err = add(at)
		case schemasByName[k] && !definitionsOnly[k]:
			byName, _ := val.(map[string]any)
			for name := range byName {
				if err = add(at + "/" + escape(name)); err != nil {
					break
				}
			}
		}
		if err != nil {
			return 0, err
		}
	}
	in.expanded[ptr] = n
	return n, nil
}

// resolve turns a local reference into a JSON pointer.
func (in *inspector) resolve(ref string) (string, bool) {
	frag, err := url.PathUnescape(strings.TrimPrefix(ref, "#"))
	if err != nil {
		return "", false
	}
	if frag != "" && !strings.HasPrefix(frag, "/") {
		ptr, ok := in.anchors[frag]
		return ptr, ok
	}
	return frag, in.at(frag) != nil
}

// at returns the value at a JSON pointer, or nil.
func (in *inspector) at(ptr string) any {
	v := in.root
	if ptr == "" {
		return v
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func escape(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1") }
