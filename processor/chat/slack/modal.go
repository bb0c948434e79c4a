package slack

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// ErrForm: the schema cannot be shown as a Slack form (too many fields,
// or a shape a form does not hold); answer in the inbox.
var ErrForm = errors.New("responseSchema does not fit a Slack form")

// AnswerBlock is the block id of the one field of a schema that is not an
// object.
const AnswerBlock = "answer"

// maxFields bounds a form's fields (Slack allows 100 blocks in a modal).
const maxFields = 40

// field is the part of a JSON Schema a form is built from: the same rules
// as the inbox form (enums as choices, numbers with their bounds, required
// marks, anything else as JSON).
type field struct {
	Type        any              `json:"type"`
	Title       string           `json:"title"`
	Description string           `json:"description"`
	Enum        []any            `json:"enum"`
	Minimum     *float64         `json:"minimum"`
	Maximum     *float64         `json:"maximum"`
	MaxLength   *int             `json:"maxLength"`
	Properties  map[string]field `json:"properties"`
	Required    []string         `json:"required"`
}

func (f field) kind() string {
	if t, ok := f.Type.(string); ok {
		return t
	}
	return ""
}

// Modal is the "Answer…" form of an interrupt: one input per property of
// the responseSchema (one input for a schema that is not an object),
// under the question; metadata is the Ref it answers.
func Modal(question string, schema json.RawMessage, metadata string) (Block, error) {
	var root field
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrForm, err)
	}
	blocks := []Block{section("*" + Escape(truncate(orNone(question), MaxSectionText-2)) + "*")}
	if root.kind() == "object" && len(root.Properties) > 0 {
		if len(root.Properties) > maxFields {
			return nil, fmt.Errorf("%w: %d fields, over %d", ErrForm, len(root.Properties), maxFields)
		}
		for _, name := range sortedNames(root.Properties) {
			if len(name) > 255 {
				return nil, fmt.Errorf("%w: a property name is over 255 characters", ErrForm)
			}
			blocks = append(blocks, input(name, root.Properties[name], slices.Contains(root.Required, name)))
		}
	} else {
		blocks = append(blocks, input(AnswerBlock, root, true))
	}
	return Block{"type": "modal", "callback_id": CallbackAnswer, "private_metadata": metadata,
		"title": plain("Answer"), "submit": plain("Send"), "close": plain("Cancel"), "blocks": blocks}, nil
}

func orNone(s string) string {
	if s == "" {
		return "(no message)"
	}
	return s
}

func sortedNames(m map[string]field) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// input is the input block of one field: block id name, action id "value".
func input(name string, f field, required bool) Block {
	label := f.Title
	if label == "" {
		label = name
	}
	var el Block
	switch {
	case len(f.Enum) > 0:
		var opts []Block
		for _, v := range f.Enum {
			raw, _ := json.Marshal(v)
			text := string(raw)
			if s, ok := v.(string); ok {
				text = s
			}
			opts = append(opts, Block{"text": plain(truncate(text, 75)), "value": truncate(string(raw), 150)})
		}
		el = Block{"type": "static_select", "options": opts[:min(len(opts), 100)]}
	case f.kind() == "boolean":
		el = Block{"type": "static_select", "options": []Block{{"text": plain("Yes"), "value": "true"},
			{"text": plain("No"), "value": "false"}}}
	case f.kind() == "number" || f.kind() == "integer":
		el = Block{"type": "number_input", "is_decimal_allowed": f.kind() == "number"}
		if f.Minimum != nil {
			el["min_value"] = strconv.FormatFloat(*f.Minimum, 'f', -1, 64)
		}
		if f.Maximum != nil {
			el["max_value"] = strconv.FormatFloat(*f.Maximum, 'f', -1, 64)
		}
	case f.kind() == "string":
		el = Block{"type": "plain_text_input"}
		if f.MaxLength != nil && *f.MaxLength > 0 && *f.MaxLength <= 3000 {
			el["max_length"] = *f.MaxLength
		}
	default:
		el = Block{"type": "plain_text_input", "multiline": true, "placeholder": plain("JSON")}
	}
	el["action_id"] = "value"
	b := Block{"type": "input", "block_id": name, "label": plain(truncate(label, 2000)), "element": el, "optional": !required}
	if f.Description != "" {
		b["hint"] = plain(truncate(f.Description, 2000))
	}
	return b
}

// Answer reads a submitted form back into the JSON answer, by the schema it
// was built from; errors are by block id, for response_action: errors.
func Answer(schema json.RawMessage, v *View) (json.RawMessage, map[string]string) {
	var root field
	_ = json.Unmarshal(schema, &root)
	errs := map[string]string{}
	values := map[string]StateValue{}
	if v != nil {
		for block, actions := range v.State.Values {
			values[block] = actions["value"]
		}
	}
	if root.kind() != "object" || len(root.Properties) == 0 {
		val, ok, msg := read(root, values[AnswerBlock])
		if msg != "" {
			errs[AnswerBlock] = msg
			return nil, errs
		}
		if !ok {
			errs[AnswerBlock] = "An answer is required."
			return nil, errs
		}
		out, _ := json.Marshal(val)
		return out, nil
	}
	obj := map[string]any{}
	for name, f := range root.Properties {
		val, ok, msg := read(f, values[name])
		switch {
		case msg != "":
			errs[name] = msg
		case ok:
			obj[name] = val
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	out, _ := json.Marshal(obj)
	return out, nil
}

// read is one field's value: present, or a message saying what is wrong.
func read(f field, sv StateValue) (any, bool, string) {
	if sv.SelectedOption != nil {
		var v any
		if err := json.Unmarshal([]byte(sv.SelectedOption.Value), &v); err != nil {
			return nil, false, "Choose one of the options."
		}
		return v, true, ""
	}
	if sv.Value == nil || *sv.Value == "" {
		return nil, false, ""
	}
	s := *sv.Value
	switch f.kind() {
	case "string":
		return s, true, ""
	case "number":
		n, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(n, 0) || math.IsNaN(n) {
			return nil, false, "Enter a number."
		}
		return n, true, ""
	case "integer":
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, false, "Enter a whole number."
		}
		return n, true, ""
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, false, "Enter JSON (for text, in double quotes)."
	}
	return v, true, ""
}

// ErrorsAt places a schema error (as processor/schema words it: "at
// /name the payload fails ...") on the block of the field it names, or on
// the first of blocks.
func ErrorsAt(detail string, blocks []string) map[string]string {
	msg := truncate(detail, 1500)
	for _, part := range strings.Split(detail, "; ") {
		if rest, ok := strings.CutPrefix(part, "at /"); ok {
			name, _, _ := strings.Cut(rest, " ")
			name, _, _ = strings.Cut(name, "/")
			name = strings.NewReplacer("~1", "/", "~0", "~").Replace(name)
			if slices.Contains(blocks, name) {
				return map[string]string{name: truncate(part, 1500)}
			}
		}
	}
	if len(blocks) == 0 {
		return map[string]string{AnswerBlock: msg}
	}
	return map[string]string{blocks[0]: msg}
}

// Fields are the block ids of the form built from schema, in order.
func Fields(schema json.RawMessage) []string {
	var root field
	_ = json.Unmarshal(schema, &root)
	if root.kind() != "object" || len(root.Properties) == 0 {
		return []string{AnswerBlock}
	}
	return sortedNames(root.Properties)
}
