package authz_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

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

func TestView(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := &subjects.Run{RunID: "r", Interrupts: []subjects.InterruptState{
		{Interrupt: subjects.Interrupt{ID: "c", Reason: "confirmation", Approvers: []string{"carol"}, Message: "ship?"}},
		{Interrupt: subjects.Interrupt{ID: "a", Reason: "confirmation", Approvers: []string{"ada"}, Message: "pay IBAN?",
			Metadata: json.RawMessage(`{"iban":"IBAN"}`), ToolCallID: "call_1"},
			Decision: &subjects.Decision{Version: 1, DecisionID: "d", InterruptID: "a", Status: subjects.StatusResolved,
				Payload: json.RawMessage(`"IBAN"`), Comment: "paid IBAN", Approver: "ada"}, DecidedAt: &at, Order: 1},
		{Interrupt: subjects.Interrupt{ID: "pin", Reason: subjects.ReasonInputRequired, Approvers: []string{"carol"}},
			Decision: &subjects.Decision{Status: subjects.StatusResolved, Payload: json.RawMessage(`"1234"`)}},
	}, History: []subjects.HistoryEntry{{Type: subjects.EventDecisionAccepted, InterruptID: "a", Approver: "ada", Detail: "resolved"}},
		RuleFailures: []subjects.RuleFailure{{InterruptID: "a", Detail: "pay-known: arguments.IBAN is missing"}}}
	evs := []subjects.Event{
		{Type: subjects.EventDecisionAccepted, RunID: "r", Subject: "interlock.resume.r.ada", Detail: "IBAN",
			Verdict: &subjects.Verdict{InterruptID: "a", Outcome: subjects.OutcomeAccepted, Approver: "ada", Via: "gateway"}},
		{Type: subjects.EventSuspended, RunID: "r", InterruptIDs: []string{"c"}},
	}
	carol := authz.Principal{Name: "carol"}
	view, vevs := authz.View(carol, rec, evs)
	data, _ := json.Marshal(map[string]any{"run": view, "events": vevs})
	assert.NotContains(t, string(data), "IBAN")
	assert.NotContains(t, string(data), `"ada"`)
	assert.NotContains(t, string(data), "1234", "sensitive answers, to her too")
	hers := view.Interrupts[1]
	assert.True(t, hers.Withheld)
	assert.Equal(t, subjects.InterruptState{Interrupt: subjects.Interrupt{ID: "a", Reason: "confirmation", ToolCallID: "call_1"},
		DecidedAt: &at, Order: 1, Withheld: true,
		Decision: &subjects.Decision{Version: 1, InterruptID: "a", Status: subjects.StatusResolved}}, hers)
	assert.Equal(t, rec.Interrupts[0], view.Interrupts[0], "her own, whole")
	assert.Equal(t, evs[1], vevs[1], "events about what she may read, whole")
	assert.Equal(t, "IBAN", evs[0].Detail, "the input is untouched")

	ada := authz.Principal{Name: "ada"}
	view, vevs = authz.View(ada, rec, evs)
	assert.Equal(t, rec.Interrupts[1], view.Interrupts[1])
	assert.Equal(t, rec.RuleFailures, view.RuleFailures, "the rule failures of hers, whole")
	assert.Equal(t, evs[0], vevs[0])
	assert.True(t, view.Interrupts[0].Withheld, "carol's, to ada")

	audit := authz.Principal{Name: "erin", Auditor: true}
	view, vevs = authz.View(audit, rec, evs)
	assert.Equal(t, authz.Redact(rec), view, "an auditor sees what Redact leaves")
	assert.Equal(t, evs, vevs)
}

// TestViewWithholdsExecutionKeysAndSensitiveVotes: reads never show an
// approved call's execution key (the replay's alone), and the votes on a
// sensitive interrupt keep who and when, not what.
func TestViewWithholdsExecutionKeysAndSensitiveVotes(t *testing.T) {
	t.Parallel()
	yes := true
	vote := subjects.Vote{DecisionID: "d1", Approver: "bob", Status: subjects.StatusResolved, Payload: json.RawMessage(`"s3cret"`)}
	rec := &subjects.Run{RunID: "r1", Interrupts: []subjects.InterruptState{
		{Interrupt: subjects.Interrupt{ID: "a", Reason: subjects.ReasonToolCall},
			Decision: &subjects.Decision{DecisionID: "d2", Status: subjects.StatusResolved, ExecutionKey: strings.Repeat("a", 64)}},
		{Interrupt: subjects.Interrupt{ID: "b", Reason: subjects.ReasonToolCall, Sensitive: &yes,
			Policy: &subjects.Policy{Approvals: 2}}, Votes: []subjects.Vote{vote}},
	}}
	out, _ := authz.View(authz.Principal{Auditor: true}, rec, nil)
	assert.Empty(t, out.Interrupts[0].Decision.ExecutionKey)
	assert.Equal(t, strings.Repeat("a", 64), rec.Interrupts[0].Decision.ExecutionKey, "the record itself is unchanged")
	require.Len(t, out.Interrupts[1].Votes, 1)
	assert.Equal(t, "bob", out.Interrupts[1].Votes[0].Approver)
	assert.Empty(t, out.Interrupts[1].Votes[0].Payload)
	assert.True(t, out.Interrupts[1].AnswerWithheld)
	assert.Equal(t, `"s3cret"`, string(rec.Interrupts[1].Votes[0].Payload))
}
