package subjects

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// CallDigest is the digest of one tool call: the lowercase hex SHA-256 of
// the RFC 8785 (JCS) canonical JSON of {"arguments": args, "tool": tool}.
// Arguments left out (empty) are {}. Two calls have the same digest exactly
// when they name the same tool with the same arguments as JSON values (key
// order, spacing, escapes and number spelling aside). The error wraps
// ErrMalformed: args is not JSON, or holds a number JSON cannot carry
// exactly as a double (RFC 8785 requires IEEE 754 doubles).
func CallDigest(tool string, args json.RawMessage) (string, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	var b bytes.Buffer
	b.WriteString(`{"arguments":`)
	if err := Canonicalize(&b, args); err != nil {
		return "", err
	}
	b.WriteString(`,"tool":`)
	writeJCSString(&b, tool)
	b.WriteByte('}')
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// Canonicalize writes the RFC 8785 canonical form of the JSON value raw to
// b: object members sorted by their names' UTF-16 code units, no
// whitespace, strings with the minimal escapes, numbers as ECMAScript
// prints a double. The error wraps ErrMalformed.
func Canonicalize(b *bytes.Buffer, raw json.RawMessage) error {
	if !utf8.Valid(raw) {
		return malformed("arguments are not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readJCSValue(dec, 0)
	if err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return malformed("arguments: data after the JSON value")
	}
	return writeJCS(b, v)
}

// maxJCSDepth bounds the nesting of canonicalized values.
const maxJCSDepth = 64

// readJCSValue reads one JSON value token by token, refusing duplicate
// member names: a parser that keeps the first and one that keeps the last
// would otherwise see two different calls under one digest.
func readJCSValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJCSDepth {
		return nil, malformed("arguments are nested deeper than %d", maxJCSDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, malformed("arguments are not JSON: %s", jsonError(err))
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			arr := []any{}
			for dec.More() {
				e, err := readJCSValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, e)
			}
			if _, err := dec.Token(); err != nil {
				return nil, malformed("arguments are not JSON: %s", jsonError(err))
			}
			return arr, nil
		case '{':
			obj := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, malformed("arguments are not JSON: %s", jsonError(err))
				}
				k, _ := kt.(string)
				if _, dup := obj[k]; dup {
					return nil, malformed("arguments repeat the member name %q", k)
				}
				e, err := readJCSValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				obj[k] = e
			}
			if _, err := dec.Token(); err != nil {
				return nil, malformed("arguments are not JSON: %s", jsonError(err))
			}
			return obj, nil
		}
		return nil, malformed("arguments are not JSON: unexpected %v", t)
	default:
		return tok, nil
	}
}

func writeJCS(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case string:
		writeJCSString(b, x)
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return malformed("number %s is out of the range of an IEEE 754 double", x)
		}
		b.WriteString(jcsNumber(f))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJCS(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJCSString(b, k)
			b.WriteByte(':')
			if err := writeJCS(b, x[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("%w: unexpected JSON value %T", ErrMalformed, v)
	}
	return nil
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785 sorts
// object member names.
func compareUTF16(a, b string) int {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	return slices.Compare(ua, ub)
}

func writeJCSString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// jcsNumber prints f as ECMAScript's Number.prototype.toString does
// (RFC 8785 section 3.2.2.3).
func jcsNumber(f float64) string {
	if f == 0 {
		return "0" // -0 too
	}
	neg := f < 0
	if neg {
		f = -f
	}
	// Shortest round-trip digits and exponent: d.ddddde±x.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expPart, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expPart)
	k := len(digits)
	n := exp + 1 // the decimal point sits after n digits
	var out string
	switch {
	case k <= n && n <= 21:
		out = digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		out = digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		out = "0." + strings.Repeat("0", -n) + digits
	default:
		sign := "+"
		if n-1 < 0 {
			sign = "-"
		}
		x := n - 1
		if x < 0 {
			x = -x
		}
		out = digits[:1]
		if k > 1 {
			out += "." + digits[1:]
		}
		out += "e" + sign + strconv.Itoa(x)
	}
	if neg {
		out = "-" + out
	}
	return out
}
