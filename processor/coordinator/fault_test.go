package coordinator

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/policy"
	"github.com/interlockhq/interlock/subjects"
)

// step is one input of a scenario: its delivery, built when it is due, and
// the handler it goes to.
type step struct {
	msg    func(e *env) *jetstream.Delivery
	handle func(co *Coordinator) jetstream.Handler
}

func outcomeStep(msg func(e *env) *jetstream.Delivery) step {
	return step{msg, func(co *Coordinator) jetstream.Handler { return co.handleOutcome }}
}

func decisionStep(msg func(e *env) *jetstream.Delivery) step {
	return step{msg, func(co *Coordinator) jetstream.Handler { return co.handleDecision }}
}

func timerStep(msg func(e *env) *jetstream.Delivery) step {
	return step{msg, func(co *Coordinator) jetstream.Handler { return co.handleTimer }}
}

// lifecycle is a run through every input kind: a suspension on two
// interrupts, a decision on one, the other's expiry (which replays), and
// the replay's completion.
var lifecycle = []step{
	outcomeStep(func(e *env) *jetstream.Delivery { return e.suspension("r1", 0, expiring, open) }),
	decisionStep(func(e *env) *jetstream.Delivery { return e.decision("r1", "", resolve("d1", "open", ""), "") }),
	timerStep(func(e *env) *jetstream.Delivery {
		e.now = deadline
		return e.timer("r1", "expiring", subjects.TimerExpire)
	}),
	outcomeStep(func(e *env) *jetstream.Delivery { return e.completion("r1", 1) }),
}

// refusal is a suspension refused for the record's size: the run fails.
var refusal = []step{
	outcomeStep(func(e *env) *jetstream.Delivery {
		e.st.SetMaxRecord(8 << 10)
		return e.suspension("r1", 0, open)
	}),
}

// ruleFails is a suspension whose operator rule fails (the call's
// arguments lack what it reads): the rule_failed event has to survive a
// crash between the record and its effects, carried by the record.
var ruleFails = []step{
	outcomeStep(func(e *env) *jetstream.Delivery {
		call, err := subjects.NewCall("issue_refund", json.RawMessage(`{"sum":5}`))
		require.NoError(e.t, err)
		return e.suspensionBy("r1", "ada", subjects.Interrupt{ID: "q", Reason: subjects.ReasonToolCall, Call: call})
	}),
}

// smallRefunds is an operator rule that approves refunds under 20, and
// fails on a call whose arguments carry no amount (ruleFails'). Its budget
// is ample: the default 10ms is wall-clock time, which a busy machine
// running the suite with -race can spend before the rule is scheduled, and
// the failure then reads "over its budget" instead of the missing amount.
func smallRefunds(t *testing.T) Config {
	t.Helper()
	set, err := policy.Parse("policies.yaml", []byte(`
budget: 10s
rules:
  - name: small-refunds
    match: 'tool == "issue_refund" && arguments.amount < 20'
    action: approve
`))
	require.NoError(t, err)
	return Config{Policies: set}
}

// play runs steps on e, each delivered again while the coordinator
// abandons it (a redelivery after a crash), and, with twice, once more
// after it was handled (an ack that was lost). It returns each step's last
// answer.
func play(t *testing.T, e *env, steps []step, twice bool) []error {
	t.Helper()
	var out []error
	for _, s := range steps {
		m := s.msg(e)
		err := handleUntilDone(t, s.handle(e.co), m)
		if twice {
			assert.Equal(t, err, s.handle(e.co)(ctx(t), again(m)), "handled again")
		}
		out = append(out, err)
	}
	return out
}

// TestFaultPointsConverge abandons the message at every named fault point
// the coordinator has, then delivers it again, as the server does after a
// crash: what the coordinator leaves behind is what it leaves without the
// crash, nothing missing and nothing twice.
func TestFaultPointsConverge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		point string
		steps []step
		rules bool
	}{
		{"outcome-start", lifecycle, false},
		{"outcome-after-record", lifecycle, false},
		{"outcome-after-record", ruleFails, true},
		{"outcome-after-index", lifecycle, false},
		{"outcome-refused-after-record", refusal, false},
		{"decision-after-record", lifecycle, false},
		{"decision-after-work", lifecycle, false},
		{"timer-after-record", lifecycle, false},
	}
	for _, tc := range tests {
		name := tc.point
		if tc.rules {
			name += "/rule-failed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{}
			if tc.rules {
				cfg = smallRefunds(t)
			}
			clean := newEnv(t, cfg)
			want := play(t, clean, tc.steps, false)
			if tc.rules {
				assert.True(t, slices.ContainsFunc(clean.state("r1").Events, func(ev string) bool {
					return strings.HasPrefix(ev, "r1 rule_failed  q small-refunds: rule failed")
				}), "the failed rule is audited")
			}

			hook, fired := fault.Once(tc.point)
			e := newEnv(t, cfg).withFault(hook)
			got := play(t, e, tc.steps, false)
			select {
			case <-fired:
			default:
				t.Fatalf("fault point %s never reached", tc.point)
			}
			assert.Equal(t, 1, e.nats.closed, "the connection dropped once")
			assert.Equal(t, errorKinds(want), errorKinds(got))
			assert.Equal(t, clean.state("r1"), e.state("r1"))
		})
	}
}

// TestRedeliveredAfterAck delivers every input again after it was handled
// (the ack lost): nothing changes the second time.
func TestRedeliveredAfterAck(t *testing.T) {
	t.Parallel()
	for name, steps := range map[string][]step{"lifecycle": lifecycle, "refusal": refusal} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clean := newEnv(t, Config{})
			play(t, clean, steps, false)
			e := newEnv(t, Config{})
			play(t, e, steps, true)
			assert.Equal(t, clean.state("r1"), e.state("r1"))
		})
	}
}

// TestFaultWhileWaiting: the fault point of a decision that waits for its
// suspension drops the connection and leaves the decision unacked.
func TestFaultWhileWaiting(t *testing.T) {
	t.Parallel()
	hook, fired := fault.Once("decision-wait")
	e := newEnv(t, Config{}).withFault(hook)
	e.suspension("r1", 0, open)
	err := e.co.handleDecision(ctx(t), e.decision("r1", "", resolve("d1", "open", ""), ""))
	<-fired
	assert.Equal(t, 1, e.nats.closed)
	require.ErrorIs(t, err, errAbandoned, "abandoned, as at every fault point")
	assert.Empty(t, e.events("r1"))
}

// errorKinds names how each answer ends its message.
func errorKinds(errs []error) []string {
	var out []string
	for _, err := range errs {
		switch _, retry := jetstream.RetryDelay(err); {
		case err == nil:
			out = append(out, "ack")
		case retry:
			out = append(out, "retry")
		case jetstream.DeadLettered(err):
			out = append(out, "dead-letter")
		case errors.Is(err, errAbandoned):
			out = append(out, "abandoned")
		default:
			out = append(out, "error: "+err.Error())
		}
	}
	return out
}

// TestRecordKeepsNoHistory: the record rewrote its whole history, a list
// growing with every transition, on each of its writes (about 800 bytes
// of a cycle's 5,800), beside the audit trail that holds every transition
// once. It keeps none now: the run's events are its history.
func TestRecordKeepsNoHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	for _, s := range lifecycle {
		require.NoError(t, s.handle(e.co)(ctx(t), s.msg(e)))
		assert.Empty(t, e.record("r1").History, "no history in the record")
	}
	var types []subjects.EventType
	for _, ev := range e.events("r1") {
		types = append(types, ev.Type)
	}
	assert.Equal(t, []subjects.EventType{subjects.EventSuspended, subjects.EventDecisionAccepted,
		subjects.EventDecisionAccepted, subjects.EventExpired, subjects.EventCompleted}, types, "the trail holds every transition")

	ruled := newEnv(t, smallRefunds(t))
	play(t, ruled, ruleFails, false)
	rec := ruled.record("r1")
	assert.Empty(t, rec.History, "no history in the record")
	require.Len(t, rec.RuleFailures, 1, "what the rule_failed event says is kept")
	assert.Equal(t, "q", rec.RuleFailures[0].InterruptID)
	assert.Contains(t, rec.RuleFailures[0].Detail, "small-refunds: rule failed")
	assert.Equal(t, subjects.Version2, rec.Version, "a version 2 field")
}

// TestRuleFailedFromAnOldRecord: a suspension that a coordinator from
// before ruleFailures recorded (its rule failures in the record's
// history), delivered again after a crash between the record and its
// effects, is audited as that coordinator would have.
func TestRuleFailedFromAnOldRecord(t *testing.T) {
	t.Parallel()
	hook, fired := fault.Once("outcome-after-record")
	e := newEnv(t, smallRefunds(t)).withFault(hook)
	m := ruleFails[0].msg(e)
	require.ErrorIs(t, e.co.handleOutcome(ctx(t), m), errAbandoned)
	<-fired
	rec, rev, err := e.st.Run(ctx(t), "r1")
	require.NoError(t, err)
	require.Len(t, rec.RuleFailures, 1)
	f := rec.RuleFailures[0]
	rec.History = []subjects.HistoryEntry{{Type: subjects.EventRuleFailed, InterruptID: f.InterruptID, Detail: f.Detail},
		{Type: subjects.EventSuspended}}
	rec.RuleFailures = nil
	_, err = e.st.PutRun(ctx(t), rec, rev)
	require.NoError(t, err)

	require.NoError(t, e.co.handleOutcome(ctx(t), again(m)))
	var failed []subjects.Event
	for _, ev := range e.events("r1") {
		if ev.Type == subjects.EventRuleFailed {
			failed = append(failed, ev)
		}
	}
	require.Len(t, failed, 1, "the old record's rule failure is audited")
	assert.Equal(t, f.Detail, failed[0].Detail)
}
