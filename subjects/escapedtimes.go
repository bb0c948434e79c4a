package subjects

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// encoding/json decodes a time.Time from the string's raw bytes without
// reading its escapes (time.Time.UnmarshalJSON), so "2026\u002d12-01T…"
// and an offset written "\u002B01:00" (.NET's default encoder escapes +)
// failed to decode in Go while every other reader, unescaping first, read
// the time they spell. unescapeTimes writes such a string out, so that a
// time means one thing to every reader.

// unescapeTimes is data with every string a time field of t holds written
// without escapes, where what it spells is printable ASCII (a time is; any
// other string stays for the decoder to refuse). It returns data itself
// when nothing is to be written out, or when data is not JSON.
func unescapeTimes(data []byte, t reflect.Type) []byte {
	if bytes.IndexByte(data, '\\') < 0 || !namesOf(t).times || !json.Valid(data) {
		return data
	}
	var edits []timeEdit
	escapedTimes(data, 0, t, &edits)
	if len(edits) == 0 {
		return data
	}
	out := make([]byte, 0, len(data))
	from := 0
	for _, e := range edits {
		out = append(out, data[from:e.start]...)
		out = append(out, e.text...)
		from = e.end
	}
	return append(out, data[from:]...)
}

// timeEdit replaces data[start:end] with text.
type timeEdit struct {
	start, end int
	text       []byte
}

// escapedTimes appends to edits, in order, the time strings with escapes
// in value (a value of type t at offset base of the message).
func escapedTimes(value []byte, base int, t reflect.Type, edits *[]timeEdit) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		if len(value) < 2 || value[0] != '"' || bytes.IndexByte(value, '\\') < 0 {
			return
		}
		var s string
		if json.Unmarshal(value, &s) != nil {
			return
		}
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\' {
				return
			}
		}
		*edits = append(*edits, timeEdit{start: base, end: base + len(value), text: []byte(`"` + s + `"`)})
	case t == rawMessageType || t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshalerType):
	case t.Kind() == reflect.Struct:
		fields := fieldsOf(t)
		members(value, base, true, func(key string, v []byte, at int) {
			if ft, ok := fields[key]; ok {
				escapedTimes(v, at, ft, edits)
			}
		})
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && t.Elem().Kind() != reflect.Uint8:
		members(value, base, false, func(_ string, v []byte, at int) { escapedTimes(v, at, t.Elem(), edits) })
	case t.Kind() == reflect.Map:
		members(value, base, true, func(_ string, v []byte, at int) { escapedTimes(v, at, t.Elem(), edits) })
	}
}

// members calls each with the key (in an object), the bytes and the offset
// of each member of value, an object or a list; it stops at anything else.
func members(value []byte, base int, object bool, each func(key string, v []byte, at int)) {
	dec := json.NewDecoder(bytes.NewReader(value))
	open, err := dec.Token()
	if err != nil || (object && open != json.Delim('{')) || (!object && open != json.Delim('[')) {
		return
	}
	for dec.More() {
		var key string
		if object {
			tok, err := dec.Token()
			if err != nil {
				return
			}
			key, _ = tok.(string)
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return
		}
		end := int(dec.InputOffset())
		each(key, v, base+end-len(v))
	}
}
