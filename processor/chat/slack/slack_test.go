package slack

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

func TestVerify(t *testing.T) {
	t.Parallel()
	secret, body := []byte("secret"), []byte("payload=%7B%7D")
	now := time.Unix(1_700_000_000, 0)
	sig := Sign(secret, now.Unix(), body)
	assert.True(t, strings.HasPrefix(sig, "v0="))
	ts := "1700000000"
	require.NoError(t, Verify(secret, ts, sig, body, now.Add(4*time.Minute)))
	assert.ErrorIs(t, Verify(secret, ts, sig, body, now.Add(6*time.Minute)), ErrStale)
	assert.ErrorIs(t, Verify(secret, ts, sig, body, now.Add(-6*time.Minute)), ErrStale)
	assert.ErrorIs(t, Verify(secret, "", sig, body, now), ErrStale)
	assert.ErrorIs(t, Verify(secret, ts, "", body, now), ErrSignature)
	assert.ErrorIs(t, Verify([]byte("other"), ts, sig, body, now), ErrSignature)
	assert.ErrorIs(t, Verify(secret, ts, sig, []byte("payload=%7B%7D "), now), ErrSignature)
	// The timestamp is signed: moving it forward breaks the signature.
	assert.ErrorIs(t, Verify(secret, "1700000001", sig, body, now), ErrSignature)
}

func TestRef(t *testing.T) {
	t.Parallel()
	r, err := ParseRef(Ref{Run: "run-1", Interrupt: "int-2"}.Value())
	require.NoError(t, err)
	assert.Equal(t, Ref{Run: "run-1", Interrupt: "int-2"}, r)
	for _, bad := range []string{"", "run-1", "run.1/x", "run-1/int 2", "/x"} {
		_, err := ParseRef(bad)
		assert.ErrorIs(t, err, ErrPayload, bad)
	}
}

// A button's value opens only for the action, channel, run and interrupt
// the gateway signed it for; a form's metadata only as signed. A value of
// another key, an unsigned one and a malformed one are refused.
func TestSeal(t *testing.T) {
	t.Parallel()
	seal := NewSeal([]byte("signing-secret"))
	ref := Ref{Run: "run-1", Interrupt: "int-2"}
	v := seal.Value(ref, ActionApprove, "C1")
	got, err := seal.Open(v, ActionApprove, "C1")
	require.NoError(t, err)
	assert.Equal(t, ref, got)
	for name, c := range map[string]struct{ value, action, channel string }{
		"other action":  {v, ActionDeny, "C1"},
		"other channel": {v, ActionApprove, "C2"},
		"other run":     {strings.Replace(v, "run-1/", "run-2/", 1), ActionApprove, "C1"},
		"other key":     {NewSeal([]byte("another-secret")).Value(ref, ActionApprove, "C1"), ActionApprove, "C1"},
		"unsigned":      {ref.Value(), ActionApprove, "C1"},
	} {
		_, err := seal.Open(c.value, c.action, c.channel)
		assert.ErrorIs(t, err, ErrForged, name)
	}
	_, err = seal.Open("nothing", ActionApprove, "C1")
	assert.ErrorIs(t, err, ErrPayload)

	at := Ref{Run: "run-1", Interrupt: "int-2", Channel: "C1", TS: "1.2"}
	got, err = seal.OpenMetadata(seal.Metadata(at))
	require.NoError(t, err)
	assert.Equal(t, at, got)
	_, err = seal.OpenMetadata(strings.Replace(seal.Metadata(at), `"1.2"`, `"1.3"`, 1))
	assert.ErrorIs(t, err, ErrForged)
	_, err = seal.OpenMetadata(`{"run":"a>","interrupt":"b"}`)
	assert.ErrorIs(t, err, ErrPayload)
}

// A question too large for a section block is not shown and cannot be
// decided in Slack: the card links to the inbox, with no buttons.
func TestCardTooLarge(t *testing.T) {
	t.Parallel()
	in := subjects.Interrupt{ID: "int-1", Reason: "tool_call", Message: strings.Repeat("x", MaxSectionText+1),
		Approvers: []string{"ada"}}
	signed := func(c Card) Card {
		c.Sign = func(action string) string {
			return NewSeal([]byte("k")).Value(Ref{Run: c.Run, Interrupt: c.Interrupt}, action, "C1")
		}
		return c
	}
	msg := signed(CardOf("refunds", "run-1", in, "https://gw/inbox#run-1/int-1")).Message()
	raw, _ := json.Marshal(msg.Blocks)
	assert.Contains(t, string(raw), "too large to show in Slack")
	assert.NotContains(t, string(raw), ActionApprove)
	assert.Contains(t, string(raw), "https://gw/inbox#run-1/int-1")
	assert.LessOrEqual(t, len(msg.Blocks), MaxBlocks)

	in.Message = "refund 10 EUR?"
	raw, _ = json.Marshal(signed(CardOf("refunds", "run-1", in, "")).Message().Blocks)
	assert.Contains(t, string(raw), ActionApprove)
	assert.Contains(t, string(raw), `"confirm"`)
	raw, _ = json.Marshal(CardOf("refunds", "run-1", in, "").Message().Blocks)
	assert.NotContains(t, string(raw), ActionApprove, "no seal: no buttons")
	off := false
	in.ChatDecisions = &off
	raw, _ = json.Marshal(signed(CardOf("refunds", "run-1", in, "")).Message().Blocks)
	assert.NotContains(t, string(raw), ActionApprove, "chatDecisions: false: no buttons")
}

func TestModalAndAnswer(t *testing.T) {
	t.Parallel()
	schema := json.RawMessage(`{"type":"object","required":["n"],"properties":{"n":{"type":"integer","minimum":1},
		"ok":{"type":"boolean"},"tags":{"type":"array"},"c":{"enum":["a",1]}}}`)
	v, err := Modal("q", schema, "{}")
	require.NoError(t, err)
	raw, _ := json.Marshal(v)
	assert.Contains(t, string(raw), `"min_value":"1"`)
	assert.Contains(t, string(raw), `"is_decimal_allowed":false`)
	s := func(x string) *string { return &x }
	view := &View{}
	view.State.Values = map[string]map[string]StateValue{
		"n":    {"value": {Value: s("3")}},
		"tags": {"value": {Value: s(`["x"]`)}},
		"c": {"value": {SelectedOption: &struct {
			Value string `json:"value"`
		}{Value: "1"}}},
	}
	out, errs := Answer(schema, view)
	require.Empty(t, errs)
	assert.JSONEq(t, `{"n":3,"tags":["x"],"c":1}`, string(out))
	view.State.Values["n"] = map[string]StateValue{"value": {Value: s("3.5")}}
	_, errs = Answer(schema, view)
	assert.Contains(t, errs["n"], "whole number")
	assert.Equal(t, map[string]string{"n": "at /n the payload fails \"minimum\""},
		ErrorsAt(`at /n the payload fails "minimum"`, []string{"c", "n"}))
}

func TestDecidedOf(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_700_000_000, 0)
	in := subjects.Interrupt{ID: "i"}
	st := subjects.InterruptState{Interrupt: in, DecidedAt: &at,
		Decision: &subjects.Decision{Status: subjects.StatusCancelled, Approver: subjects.ExpiryApprover}}
	assert.Equal(t, &Decided{Status: "Expired", At: at}, DecidedOf(st, ""))
	st.Decision = &subjects.Decision{Status: subjects.StatusCancelled, Approver: "ada"}
	assert.Equal(t, &Decided{By: "ada", Status: "Denied", At: at, Via: "slack"}, DecidedOf(st, "slack"))
	st.Decision = &subjects.Decision{Status: subjects.StatusResolved, Approver: "ada"}
	assert.Equal(t, "Approved", DecidedOf(st, "").Status)
	st.ResponseSchema = json.RawMessage(`{}`)
	assert.Equal(t, "Answered", DecidedOf(st, "").Status)
	assert.Nil(t, DecidedOf(subjects.InterruptState{Interrupt: in}, ""))
}
