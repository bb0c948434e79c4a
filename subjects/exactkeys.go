package subjects

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"time"
)

// encoding/json matches an object's keys to a struct's fields ignoring
// case (and folding the Kelvin sign and the long s), so {"Status":...}
// decodes as "status", and of {"status":"resolved","Status":"cancelled"}
// the second wins. Every other reader of the protocol (the schemas, the
// Python and TypeScript SDKs, an auditor's script) matches keys exactly and
// reads that decision otherwise, or refuses it. exactKeys refuses it here
// too, so that one message means one thing to every reader.

// encoding/json also reads what the other readers refuse: null as a
// boolean (false, or absent: `"sensitive": null` made an interrupt not
// sensitive where the SDKs refused it), and a time whose fraction follows
// a comma (time.Parse takes "00:00:00,5Z"; RFC 3339 and the SDKs want a full
// stop), and null as an item of a list of objects (the zero object: a null
// vote read as a vote by nobody). exactKeys refuses these in the fields t
// describes.

// exactKeys checks that data nests at most depth levels, that every key of
// data that names a field of t (a pointer to the struct data was decoded
// into) is spelled as the field's JSON name, and that no boolean field or
// list of objects holds null and no time field a comma. It reads only
// objects t describes: payloads, metadata and other free-form values
// (json.RawMessage, any, maps' keys) keep any key and any value. Most
// messages have no key that could be another's case variant and no such
// value, which a scan of their bytes tells (scanKeys, which also refuses a
// key repeated in one object); the others are read object by object.
func exactKeys(data []byte, t reflect.Type, depth int) error {
	plain, err := scanKeys(data, namesOf(t), depth)
	if err != nil || plain {
		return err
	}
	return exactKeysIn(data, t)
}

// exactKeysIn is exactKeys without the scan.
func exactKeysIn(data []byte, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == rawMessageType || t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshalerType):
		return nil
	case t.Kind() == reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return nil // null, or not an object: the decoder judged it
		}
		fields := fieldsOf(t)
		for key, value := range obj {
			ft, ok := fields[key]
			if !ok {
				for name := range fields {
					if strings.EqualFold(name, key) { // as encoding/json folds (the Kelvin sign as k, the long s as s)
						return malformed("field %q is not %q: field names are case-sensitive", key, name)
					}
				}
				continue // unknown fields are the decoder's to refuse
			}
			if err := literal(key, value, ft); err != nil {
				return err
			}
			if err := exactKeysIn(value, ft); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return nil
		}
		var items []json.RawMessage
		if json.Unmarshal(data, &items) != nil {
			return nil
		}
		objects := objectElem(t)
		for _, item := range items {
			if objects && string(bytes.TrimSpace(item)) == "null" {
				return malformed("a list of %s objects holds null", structName(t.Elem()))
			}
			if err := exactKeysIn(item, t.Elem()); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return nil
		}
		for _, value := range obj {
			if err := exactKeysIn(value, t.Elem()); err != nil {
				return err
			}
		}
	}
	return nil
}

// maxSafeInteger is the largest integer every reader holds exactly
// (2^53 - 1: JavaScript's numbers are IEEE doubles).
const maxSafeInteger = 1<<53 - 1

// literal refuses null for a boolean field, a comma in a time field and an
// integer beyond maxSafeInteger in an integer field (or a list of them).
func literal(key string, value json.RawMessage, t reflect.Type) error {
	switch valueKind(t) {
	case intValue:
		var ns []json.Number
		if json.Unmarshal(value, &ns) != nil {
			var n json.Number
			if json.Unmarshal(value, &n) != nil {
				return nil // null, or not a number: the decoder judged it
			}
			ns = []json.Number{n}
		}
		for _, n := range ns {
			if f, err := n.Float64(); err == nil && (f > maxSafeInteger || f < -maxSafeInteger) {
				return malformed("field %q: %s is beyond ±(2^53-1), which not every reader holds exactly", key, n)
			}
		}
	case boolValue:
		if string(bytes.TrimSpace(value)) == "null" {
			return malformed("field %q: must be true or false, not null", key)
		}
	case timeValue:
		var s string
		if json.Unmarshal(value, &s) == nil && strings.Contains(s, ",") {
			return malformed("field %q: %q is not an RFC 3339 time (a full stop comes before a fraction of a second)", key, s)
		}
	}
	return nil
}

// What a field's value is checked for besides its type.
const (
	known      uint8 = 1 << iota // a field name
	boolValue                    // true or false, not null
	timeValue                    // a time: no comma
	intValue                     // an integer, or a list of them: within ±maxSafeInteger
	objectList                   // a list of objects: no null among them
)

// valueKind is boolValue, timeValue, intValue or objectList for a field of
// type t, or 0.
func valueKind(t reflect.Type) uint8 {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if objectElem(t) {
		return objectList
	}
	if t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8 {
		if k := valueKind(t.Elem()); k == intValue {
			return k
		}
	}
	switch {
	case t.Kind() == reflect.Bool:
		return boolValue
	case t == timeType:
		return timeValue
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return intValue
	}
	return 0
}

// plainValue reports whether the value at the start of data (after a key's
// colon) passes the checks kind names without reading its object.
func plainValue(data []byte, kind uint8) bool {
	data = bytes.TrimLeft(data, " \t\n\r")
	if kind&boolValue != 0 && bytes.HasPrefix(data, []byte("null")) {
		return false
	}
	if kind&intValue != 0 {
		// 2^53 has 16 digits: a value with fewer is safe.
		digits := 0
		for _, c := range data {
			switch {
			case '0' <= c && c <= '9':
				if digits++; digits >= 16 {
					return false
				}
			case c == '-' || c == '[' || c == ' ' || c == ',' || c == '\t' || c == '\n' || c == '\r':
				digits = 0
			default:
				if c != '.' && c != 'e' && c != 'E' && c != '+' {
					goto done // the end of the number or list
				}
				digits = 0
			}
		}
	done:
	}
	if kind&timeValue != 0 && len(data) > 0 && data[0] == '"' {
		for _, c := range data[1:] {
			switch c {
			case '"':
				return true
			case ',', '\\':
				return false
			}
		}
	}
	return true
}

// objectElem reports whether t is a list whose items decode as objects
// field by field: encoding/json reads a null item as the zero object, which
// every other reader refuses.
func objectElem(t reflect.Type) bool {
	if t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
		return false
	}
	e := t.Elem()
	for e.Kind() == reflect.Pointer {
		e = e.Elem()
	}
	return e.Kind() == reflect.Struct && e != timeType && !reflect.PointerTo(e).Implements(unmarshalerType)
}

// structName is the name of the struct t holds, for an error.
func structName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

var (
	timeType        = reflect.TypeFor[time.Time]()
	rawMessageType  = reflect.TypeFor[json.RawMessage]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	fieldCache      sync.Map // reflect.Type: map[string]reflect.Type
	nameCache       sync.Map // reflect.Type: *names
)

// names are the JSON field names of a type and of every struct it holds.
type names struct {
	exact map[string]uint8 // known, and the checks of the fields so named
	lower map[string]bool  // the names lower-cased
	times bool             // some field is a time
}

// namesOf is the names of t's fields and its fields' fields, at any depth.
func namesOf(t reflect.Type) *names {
	if n, ok := nameCache.Load(t); ok {
		return n.(*names)
	}
	n := &names{exact: map[string]uint8{}, lower: map[string]bool{}}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t == rawMessageType || seen[t] || reflect.PointerTo(t).Implements(unmarshalerType) {
			return
		}
		seen[t] = true
		for name, ft := range fieldsOf(t) {
			n.exact[name] |= known | valueKind(ft)
			n.times = n.times || valueKind(ft) == timeValue
			n.lower[strings.ToLower(name)] = true
			walk(ft)
		}
	}
	walk(t)
	nameCache.Store(t, n)
	return n
}

// scanKeys reads the keys of data in one pass. It refuses a message
// nested deeper than depth levels, and a key that
// appears twice in one object, anywhere in the message: encoding/json
// merges both into one struct (fields set by the first survive), the
// Python and TypeScript SDKs keep the last, so such a message would mean
// two things. And it reports whether every key is plain: one of n exactly,
// or ASCII without escapes and none of n in any case (the long s and the
// Kelvin sign fold to ASCII letters); otherwise the caller reads the
// message object by object.
func scanKeys(data []byte, n *names, depth int) (plain bool, err error) {
	const fewKeys = 16
	type container struct {
		object  bool
		objects bool                // a list of objects (objectList): null in it is not plain
		from    int                 // its keys are keys[from:]
		many    map[string]struct{} // its keys, once it has more than a few
	}
	listed := false // the last key's value is a list of objects
	stack := make([]container, 0, 8)
	keys := make([][]byte, 0, 32)
	var lower [64]byte
	plain = true
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '{', '[':
			if len(stack) == depth {
				return false, malformed("nested deeper than %d levels", depth)
			}
			stack = append(stack, container{object: data[i] == '{', objects: listed && data[i] == '[', from: len(keys)})
			listed = false
			continue
		case '}', ']':
			if len(stack) > 0 {
				keys = keys[:stack[len(stack)-1].from]
				stack = stack[:len(stack)-1]
			}
			listed = false
			continue
		case 'n':
			if len(stack) > 0 && stack[len(stack)-1].objects {
				plain = false // null in a list of objects: read object by object
			}
			continue
		case '"':
		default:
			continue
		}
		j, simple := i+1, true
		for ; j < len(data) && data[j] != '"'; j++ {
			if data[j] == '\\' {
				simple = false
				j++
			} else if data[j] >= 0x80 {
				simple = false
			}
		}
		if j >= len(data) {
			return false, nil // not JSON: the decoder judged it
		}
		k := j + 1
		for k < len(data) && (data[k] == ' ' || data[k] == '\t' || data[k] == '\n' || data[k] == '\r') {
			k++
		}
		if k < len(data) && data[k] == ':' && len(stack) > 0 && stack[len(stack)-1].object {
			key := data[i+1 : j]
			if !simple {
				var unquoted string
				if json.Unmarshal(data[i:j+1], &unquoted) == nil {
					key = []byte(unquoted)
				}
			}
			top := &stack[len(stack)-1]
			if top.many == nil {
				for _, seen := range keys[top.from:] {
					if bytes.Equal(seen, key) {
						return false, malformed("field %q appears twice in one object", key)
					}
				}
				keys = append(keys, key)
				if len(keys)-top.from > fewKeys {
					// Linear in the object's keys from here on, whatever
					// their number (a completion's result may hold 100,000).
					top.many = make(map[string]struct{}, 2*fewKeys)
					for _, k := range keys[top.from:] {
						top.many[string(k)] = struct{}{}
					}
				}
			} else {
				if _, dup := top.many[string(key)]; dup {
					return false, malformed("field %q appears twice in one object", key)
				}
				top.many[string(key)] = struct{}{}
			}
			kind := n.exact[string(key)]
			listed = kind&objectList != 0
			switch {
			case kind != 0:
				if kind&^(known|objectList) != 0 && !plainValue(data[k+1:], kind) {
					plain = false
				}
			case !simple || len(key) > len(lower):
				plain = false
			default:
				for x, c := range key {
					if 'A' <= c && c <= 'Z' {
						c += 'a' - 'A'
					}
					lower[x] = c
				}
				if n.lower[string(lower[:len(key)])] {
					plain = false
				}
			}
		}
		i = j
	}
	return plain, nil
}

// fieldsOf is t's fields by JSON name, those of embedded structs without a
// name of their own included.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	out := map[string]reflect.Type{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if tag == "-" || (!f.IsExported() && !f.Anonymous) {
				continue
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if f.Anonymous && tag == "" && ft.Kind() == reflect.Struct {
				walk(ft)
				continue
			}
			if tag == "" {
				tag = f.Name
			}
			out[tag] = f.Type
		}
	}
	walk(t)
	fieldCache.Store(t, out)
	return out
}
