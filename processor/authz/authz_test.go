package authz_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/subjects"
)

func TestDecide(t *testing.T) {
	open := subjects.Interrupt{ID: "open"}
	named := subjects.Interrupt{ID: "named", Approvers: []string{"ada"}, ApproverGroups: []string{"finance"}}
	ada := authz.Principal{Name: "ada"}
	carol := authz.Principal{Name: "carol", Groups: []string{"finance"}}
	bob := authz.Principal{Name: "bob", Groups: []string{"ops"}}
	audit := authz.Principal{Name: "eve", Auditor: true}
	for _, tc := range []struct {
		in   subjects.Interrupt
		p    authz.Principal
		want bool
	}{
		{open, authz.Principal{}, true}, {open, bob, true},
		{named, authz.Principal{}, false}, {named, ada, true}, {named, carol, true}, {named, bob, false},
		{named, audit, false},
	} {
		err := authz.Decide(tc.in, tc.p)
		assert.Equal(t, tc.want, err == nil, "%s deciding %s: %v", tc.p.Name, tc.in.ID, err)
		if err != nil {
			assert.True(t, errors.Is(err, authz.ErrNotAllowed))
		}
		assert.Equal(t, tc.want || tc.p.Auditor, authz.MayRead(tc.in, tc.p))
	}
	rec := &subjects.Run{Interrupts: []subjects.InterruptState{{Interrupt: named}}}
	assert.True(t, authz.MayReadRun(rec, carol))
	assert.False(t, authz.MayReadRun(rec, bob))
	assert.True(t, authz.MayReadRun(rec, audit))
	assert.False(t, authz.MayReadRun(&subjects.Run{}, ada), "a run that asked nothing is the auditors'")
}

func TestRedact(t *testing.T) {
	no := false
	rec := &subjects.Run{Interrupts: []subjects.InterruptState{
		{Interrupt: subjects.Interrupt{ID: "pin", Reason: subjects.ReasonInputRequired},
			Decision: &subjects.Decision{DecisionID: "d1", Status: subjects.StatusResolved, Payload: json.RawMessage(`"1234"`),
				Comment: "my pin", Metadata: json.RawMessage(`{"k":1}`), Approver: "ada"}},
		{Interrupt: subjects.Interrupt{ID: "plain", Reason: subjects.ReasonInputRequired, Sensitive: &no},
			Decision: &subjects.Decision{DecisionID: "d2", Status: subjects.StatusResolved, Payload: json.RawMessage(`"x"`)}},
	}}
	out := authz.Redact(rec)
	require.Equal(t, `"1234"`, string(rec.Interrupts[0].Decision.Payload), "the record itself is untouched")
	got := out.Interrupts[0]
	assert.True(t, got.AnswerWithheld)
	assert.Empty(t, got.Decision.Payload)
	assert.Empty(t, got.Decision.Comment)
	assert.Empty(t, got.Decision.Metadata)
	assert.Equal(t, "ada", got.Decision.Approver, "who answered, and that they did, stays")
	assert.Equal(t, `"x"`, string(out.Interrupts[1].Decision.Payload), "sensitive: false shows the answer")
}
