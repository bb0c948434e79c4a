package subjects

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"unicode"
	"unicode/utf8"
)

// MaxIDLen bounds interrupt, decision, thread and approver ids.
const MaxIDLen = 256

// How deep a message nests objects and lists, counting its own: every
// reader holds MaxDepth (Python's decoder gives up near 990 levels), and a
// decision, which the coordinator carries up to four levels deeper (in a
// work item's decisions, a vote's metadata in the votes of one), at most
// MaxDecisionDepth.
const (
	MaxDepth         = 128
	MaxDecisionDepth = 64
)

// DecodeDecision parses and validates a decision from outside input.
func DecodeDecision(data []byte) (Decision, error) {
	var d Decision
	if err := decode(data, MaxDecisionSize, &d); err != nil {
		return decisionIDs(data), err
	}
	if err := d.Validate(); err != nil {
		return d, err
	}
	// Votes, execution keys and rules are the coordinator's to write.
	switch {
	case len(d.Votes) > 0:
		return d, malformed("votes is set by the coordinator only")
	case d.ExecutionKey != "":
		return d, malformed("executionKey is set by the coordinator only")
	case d.Rule != "":
		return d, malformed("rule is set by the coordinator only")
	}
	// The limit holds for the decision as the run record stores it too:
	// re-encoding escapes <, > and & and replaces invalid UTF-8, which can
	// make a body under the limit several times larger (RecordBound counts
	// on MaxDecisionSize).
	if enc, _ := json.Marshal(d); len(enc) > MaxDecisionSize {
		return d, &ProtocolError{Code: CodeTooLarge, err: ErrTooLarge, Detail: fmt.Sprintf(
			"%d bytes as recorded (JSON re-encoded: <, > and & escaped, invalid UTF-8 replaced), the limit is %d",
			len(enc), MaxDecisionSize)}
	}
	return d, nil
}

// decisionIDs is what a refused decision still names: its decisionId and
// interruptId, when the body is a JSON object within the size limit and
// they are valid ids, so the verdict matches what was sent. Nothing else of
// a refused body is trusted.
func decisionIDs(data []byte) Decision {
	var ids struct {
		DecisionID  string `json:"decisionId"`
		InterruptID string `json:"interruptId"`
	}
	if len(data) > MaxDecisionSize || json.Unmarshal(data, &ids) != nil {
		return Decision{}
	}
	var d Decision
	if validateID("decisionId", ids.DecisionID) == nil {
		d.DecisionID = ids.DecisionID
	}
	if validateID("interruptId", ids.InterruptID) == nil {
		d.InterruptID = ids.InterruptID
	}
	return d
}

// Validate checks a decision's fields.
func (d *Decision) Validate() error {
	if err := validateID("decisionId", d.DecisionID); err != nil {
		return err
	}
	if err := validateID("interruptId", d.InterruptID); err != nil {
		return err
	}
	switch d.Status {
	case StatusResolved, StatusCancelled, StatusWithdrawn:
	case "":
		return malformed("status is required: %q or %q", StatusResolved, StatusCancelled)
	default:
		return malformed("status %q is not %q or %q", d.Status, StatusResolved, StatusCancelled)
	}
	if isNull(d.Payload) {
		return malformed("payload is null: omit it to send no payload")
	}
	if err := validateObject("metadata", d.Metadata); err != nil {
		return err
	}
	if d.Approver != "" {
		if err := validateID("approver", d.Approver); err != nil {
			return err
		}
	}
	if d.CallDigest != "" && !digestRE.MatchString(d.CallDigest) {
		return malformed("callDigest must be 64 lowercase hex digits")
	}
	if isNull(d.Arguments) {
		return malformed("arguments is null: omit it to keep the call's arguments")
	}
	if err := validateObject("arguments", d.Arguments); err != nil {
		return err
	}
	if d.ExecutionKey != "" && !digestRE.MatchString(d.ExecutionKey) {
		return malformed("executionKey must be 64 lowercase hex digits")
	}
	return checkVersion(d.Version, d)
}

// validateReplayed checks a decision a replay carries: one the coordinator
// applied, so resolved or cancelled (a withdrawal takes a vote back and
// never reaches a pass), in a version this build speaks (0 is version 1,
// as left out).
func (d *Decision) validateReplayed() error {
	if err := d.Validate(); err != nil {
		return err
	}
	if d.Status != StatusResolved && d.Status != StatusCancelled {
		return malformed("status %q: a replay carries decisions %q or %q only", d.Status, StatusResolved, StatusCancelled)
	}
	if d.Version < 0 || d.Version > Version2 {
		return &ProtocolError{Code: CodeUnsupportedVersion, err: ErrUnsupportedVersion,
			Detail: fmt.Sprintf("decision version %d; this build speaks versions %d and %d", d.Version, Version, Version2)}
	}
	return nil
}

// DecodeSuspension parses and validates a suspension.
func DecodeSuspension(data []byte) (Suspension, error) {
	var s Suspension
	if err := decode(data, MaxMessageSize, &s); err != nil {
		return Suspension{}, err
	}
	return s, s.Validate()
}

// Validate checks a suspension's fields and every interrupt in it.
func (s *Suspension) Validate() error {
	if err := s.PassRef.validate(); err != nil {
		return err
	}
	if len(s.Interrupts) == 0 {
		return malformed("interrupts is empty: a suspension needs at least one interrupt")
	}
	seen := make(map[string]bool, len(s.Interrupts))
	for i := range s.Interrupts {
		in := &s.Interrupts[i]
		if err := in.Validate(); err != nil {
			return fmt.Errorf("interrupts[%d]: %w", i, err)
		}
		if seen[in.ID] {
			return malformed("interrupts[%d]: id %q appears twice", i, in.ID)
		}
		seen[in.ID] = true
		if in.Policy != nil && len(in.Policy.Rules) > 0 {
			return malformed("interrupts[%d]: policy.rules is set by the coordinator only", i)
		}
	}
	if s.Requester != "" {
		if s.Pass != 0 {
			return malformed("requester is reported on pass 0 only")
		}
		if err := validateID("requester", s.Requester); err != nil {
			return err
		}
	}
	if err := checkVersion(s.Version, s); err != nil {
		return err
	}
	return validateJournal(s.Journal)
}

// Validate checks an interrupt's fields.
func (in *Interrupt) Validate() error {
	if err := validateID("id", in.ID); err != nil {
		return err
	}
	if err := validateID("reason", in.Reason); err != nil {
		return err
	}
	if len(in.ResponseSchema) > 0 && !isObject(in.ResponseSchema) {
		return malformed("responseSchema must be a JSON Schema object")
	}
	if err := validateObject("metadata", in.Metadata); err != nil {
		return err
	}
	for i, a := range in.Approvers {
		if err := validateID(fmt.Sprintf("approvers[%d]", i), a); err != nil {
			return err
		}
	}
	for i, g := range in.ApproverGroups {
		if err := validateID(fmt.Sprintf("approverGroups[%d]", i), g); err != nil {
			return err
		}
	}
	for i, sec := range in.RemindBeforeSeconds {
		if sec <= 0 {
			return malformed("remindBeforeSeconds[%d] is %d; reminders are seconds before the deadline, more than 0", i, sec)
		}
	}
	if in.Call != nil {
		if err := in.Call.validate(); err != nil {
			return err
		}
	}
	if in.Policy != nil {
		if err := in.Policy.validate(); err != nil {
			return err
		}
	}
	if p := in.OnExpiry; p != nil {
		switch p.Action {
		case ExpiryCancel, "":
		case ExpiryResolve:
			if len(p.Payload) == 0 || isNull(p.Payload) {
				return malformed("onExpiry: resolve needs a payload (the answer to apply)")
			}
		case ExpiryEscalate:
			if p.ExtendSeconds <= 0 {
				return malformed("onExpiry: escalate needs extendSeconds > 0")
			}
		default:
			return malformed("onExpiry.action %q is not cancel, resolve or escalate", p.Action)
		}
		if p.Times < 0 {
			return malformed("onExpiry.times %d is negative", p.Times)
		}
		for i, a := range p.Approvers {
			if err := validateID(fmt.Sprintf("onExpiry.approvers[%d]", i), a); err != nil {
				return err
			}
		}
	}
	return nil
}

// DecodeCompletion parses and validates a completion.
func DecodeCompletion(data []byte) (Completion, error) {
	var c Completion
	if err := decode(data, MaxMessageSize, &c); err != nil {
		return Completion{}, err
	}
	if err := c.PassRef.validate(); err != nil {
		return Completion{}, err
	}
	return c, validateJournal(c.Journal)
}

// DecodeFailure parses and validates a failure.
func DecodeFailure(data []byte) (Failure, error) {
	var f Failure
	if err := decode(data, MaxMessageSize, &f); err != nil {
		return Failure{}, err
	}
	if err := f.PassRef.validate(); err != nil {
		return Failure{}, err
	}
	if f.Error == "" {
		return Failure{}, malformed("error is required")
	}
	return f, nil
}

// DecodeWork parses and validates a work item.
func DecodeWork(data []byte) (Work, error) {
	var w Work
	if err := decode(data, MaxMessageSize, &w); err != nil {
		return Work{}, err
	}
	if err := w.PassRef.validate(); err != nil {
		return Work{}, err
	}
	for i := range w.Decisions {
		if err := w.Decisions[i].validateReplayed(); err != nil {
			return Work{}, fmt.Errorf("decisions[%d]: %w", i, err)
		}
	}
	if err := checkVersion(w.Version, &w); err != nil {
		return Work{}, err
	}
	return w, validateJournal(w.Journal)
}

// DecodeTimer parses and validates a timer.
func DecodeTimer(data []byte) (Timer, error) {
	var t Timer
	if err := decode(data, MaxMessageSize, &t); err != nil {
		return Timer{}, err
	}
	if err := ValidateToken("runId", t.RunID); err != nil {
		return Timer{}, malformedBy(err)
	}
	if err := validateID("interruptId", t.InterruptID); err != nil {
		return Timer{}, err
	}
	if err := ValidateToken("name", t.Name); err != nil {
		return Timer{}, malformedBy(err)
	}
	if t.Kind != TimerExpire && t.Kind != TimerRemind {
		return Timer{}, malformed("kind %q is not %q or %q", t.Kind, TimerExpire, TimerRemind)
	}
	return t, nil
}

// DecodeNotice parses and validates a notice.
func DecodeNotice(data []byte) (Notice, error) {
	var n Notice
	if err := decode(data, MaxMessageSize, &n); err != nil {
		return Notice{}, err
	}
	if err := n.PassRef.validate(); err != nil {
		return Notice{}, err
	}
	switch n.Kind {
	case KindReminder, KindEscalated, KindExpired:
	default:
		return Notice{}, malformed("kind %q is not reminder, escalated or expired", n.Kind)
	}
	if len(n.Interrupts) == 0 {
		return Notice{}, malformed("interrupts is empty")
	}
	if err := ValidateToken("timer", n.Timer); err != nil {
		return Notice{}, malformedBy(err)
	}
	return n, nil
}

// NestedDeeper reports whether the JSON text data nests objects and lists
// more than limit levels: what a writer checks before it sends, since
// every decoder refuses a message deeper than MaxDepth.
func NestedDeeper(data []byte, limit int) bool {
	level := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			if level++; level > limit {
				return true
			}
		case '}', ']':
			level--
		}
	}
	return false
}

// decode enforces the size limit, the version and strict field names.
func decode(data []byte, limit int, v any) error {
	if len(data) > limit {
		return &ProtocolError{Code: CodeTooLarge, err: ErrTooLarge,
			Detail: fmt.Sprintf("%d bytes, the limit is %d", len(data), limit)}
	}
	if !utf8.Valid(data) {
		// encoding/json keeps invalid bytes in a payload's raw text, which
		// the Python and TypeScript readers of the replay then refuse.
		return malformed("not UTF-8 text")
	}
	var head struct {
		Version *json.RawMessage `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return malformed("not a JSON object: %s", jsonError(err))
	}
	if head.Version == nil {
		return malformed("version is required (this build speaks version %d)", Version)
	}
	if v := string(*head.Version); v != fmt.Sprint(Version) && v != fmt.Sprint(Version2) {
		return &ProtocolError{Code: CodeUnsupportedVersion, err: ErrUnsupportedVersion,
			Detail: fmt.Sprintf("version %s; this build speaks versions %d and %d", *head.Version, Version, Version2)}
	}
	dec := json.NewDecoder(bytes.NewReader(unescapeTimes(data, reflect.TypeOf(v))))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return malformed("%s", jsonError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return malformed("data after the JSON object")
	}
	depth := MaxDepth
	if _, ok := v.(*Decision); ok {
		depth = MaxDecisionDepth
	}
	return exactKeys(data, reflect.TypeOf(v), depth)
}

// jsonError turns encoding/json errors into a message naming the field.
func jsonError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return fmt.Sprintf("field %q: JSON %s cannot be a %s", te.Field, te.Value, te.Type)
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se)
	}
	return err.Error()
}

func (p *PassRef) validate() error {
	if err := ValidateToken("runId", p.RunID); err != nil {
		return malformedBy(err)
	}
	if err := ValidateToken("agent", p.Agent); err != nil {
		return malformedBy(err)
	}
	if p.ThreadID != "" {
		if err := validateID("threadId", p.ThreadID); err != nil {
			return err
		}
	}
	if p.Pass < 0 {
		return malformed("pass %d is negative", p.Pass)
	}
	return nil
}

func validateJournal(j Journal) error {
	for k, v := range j {
		if err := validateID("journal key", k); err != nil {
			return err
		}
		if len(v) == 0 {
			return malformed("journal %q has no value", k)
		}
	}
	return nil
}

// validateID checks an id that travels in a body: non-empty, bounded,
// valid UTF-8, no control characters.
func validateID(field, s string) error {
	switch {
	case s == "":
		return malformed("%s is required", field)
	case len(s) > MaxIDLen:
		return malformed("%s is %d bytes, longer than %d", field, len(s), MaxIDLen)
	case !utf8.ValidString(s):
		return malformed("%s is not valid UTF-8", field)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return malformed("%s has control character %q", field, r)
		}
	}
	return nil
}

func validateObject(field string, raw json.RawMessage) error {
	if len(raw) > 0 && !isObject(raw) {
		return malformed("%s must be a JSON object", field)
	}
	return nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) > 0 && string(bytes.TrimSpace(raw)) == "null"
}

func isObject(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && t[0] == '{'
}

// MaxObservationBytes bounds an observation another role reports.
const MaxObservationBytes = 16 << 10

// DecodeObservation parses an observation of type t (one of
// ObservationTypes, the last token of its subject) and keeps only what an
// observation of that type says: for notification_failed the agent, pass,
// interrupts, sink, attempts, detail and subject; for access_refused the
// code, detail, identity, address and request. Its type and observer come
// from t, never from the body; its run and time are the caller's to set.
func DecodeObservation(t EventType, data []byte) (Event, error) {
	observer, ok := ObservationTypes[t]
	if !ok {
		return Event{}, malformed("%q is not an observation type", t)
	}
	var in Event
	if err := decode(data, MaxObservationBytes, &in); err != nil {
		return Event{}, err
	}
	out := Event{Version: Version, Type: t, Observer: observer, Detail: in.Detail}
	switch t {
	case EventNotificationFailed:
		if in.Agent != "" {
			if err := ValidateToken("agent", in.Agent); err != nil {
				return Event{}, malformedBy(err)
			}
		}
		if len(in.InterruptIDs) > MaxObservedInterrupts {
			return Event{}, malformed("%d interrupt ids, the limit is %d", len(in.InterruptIDs), MaxObservedInterrupts)
		}
		out.Agent, out.Pass, out.InterruptIDs = in.Agent, in.Pass, in.InterruptIDs
		out.Sink, out.Attempts, out.Subject = in.Sink, in.Attempts, in.Subject
	case EventAccessRefused:
		out.Code, out.Identity, out.Address, out.Request = in.Code, in.Identity, in.Address, in.Request
	}
	return out, nil
}

// MaxObservedInterrupts bounds the interrupt ids one observation names.
const MaxObservedInterrupts = 256
