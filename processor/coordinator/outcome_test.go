package coordinator

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// TestInputRejections covers every code other input (pass outcomes,
// timers, other roles' observations) is refused with: audited as an
// input_rejected event under the run it names, and dead-lettered when no
// retry can fix it.
func TestInputRejections(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// setup runs on a fresh coordinator before send.
		setup func(e *env)
		// send delivers the input and returns it with the handler's answer.
		send func(e *env) (*jetstream.Delivery, error)
		run  string // the run the refusal is filed under; default r1
		code subjects.Code
		// kept: the input is acked (audited, nothing to dead-letter).
		kept bool
		// status is r1's status after, when set.
		status subjects.RunStatus
		// failure is in r1's error after, when set.
		failure string
	}{
		{name: "outcome on an unparsable subject", code: subjects.CodeInvalidSubject, run: subjects.NoRun,
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.msg("interlock.suspended.refunds", subjects.Suspension{PassRef: ref("r1", 0)}, nil)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "outcome not JSON", code: subjects.CodeMalformed,
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.msg(e.must(e.ns.Suspended(agent, "r1")), []byte(`{`), nil)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "outcome of an unsupported version", code: subjects.CodeUnsupportedVersion,
			send: func(e *env) (*jetstream.Delivery, error) {
				c := subjects.Completion{PassRef: ref("r1", 0)}
				c.Version = 99
				m := e.msg(e.must(e.ns.Completed(agent, "r1")), c, nil)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "outcome over the message size", code: subjects.CodeTooLarge,
			send: func(e *env) (*jetstream.Delivery, error) {
				c := subjects.Completion{PassRef: ref("r1", 0), Result: json.RawMessage(`"` + strings.Repeat("x", subjects.MaxMessageSize) + `"`)}
				m := e.msg(e.must(e.ns.Completed(agent, "r1")), c, nil)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "body names another run than the subject", code: subjects.CodeMalformed,
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.msg(e.must(e.ns.Completed(agent, "r1")), subjects.Completion{PassRef: ref("r2", 0)}, nil)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "first pass that is not pass 0", code: subjects.CodeMalformed,
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.completion("r1", 3)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		// The pass can go no further (its worker acked the work item): the
		// run fails with the reason, where before it stayed resuming.
		{name: "interrupt raised twice", code: subjects.CodeMalformed, status: subjects.RunFailed, failure: "already raised",
			setup: func(e *env) {
				e.suspend("r1", 0, open)
				e.decide("r1", "", resolve("d1", "open", ""))
			},
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.suspension("r1", 1, open)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		// A body that does not decode, of the pass the record waits for,
		// from the run's own agent: before, the run stayed resuming.
		{name: "a replay's suspension that does not decode", code: subjects.CodeMalformed, status: subjects.RunFailed,
			failure: "interrupt",
			setup: func(e *env) {
				e.suspend("r1", 0, open)
				e.decide("r1", "", resolve("d1", "open", ""))
			},
			send: func(e *env) (*jetstream.Delivery, error) {
				body := fmt.Sprintf(`{"version":1,"runId":"r1","agent":%q,"pass":1,"interrupts":[{"reason":"tool_call"}]}`, agent)
				m := e.msg(e.must(e.ns.Suspended(agent, "r1")), []byte(body), nil)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "a replay's completion that does not decode", code: subjects.CodeMalformed, status: subjects.RunFailed,
			setup: func(e *env) {
				e.suspend("r1", 0, open)
				e.decide("r1", "", resolve("d1", "open", ""))
			},
			send: func(e *env) (*jetstream.Delivery, error) {
				body := fmt.Sprintf(`{"version":1,"runId":"r1","agent":%q,"pass":1,"result":1,"result":2}`, agent)
				m := e.msg(e.must(e.ns.Completed(agent, "r1")), []byte(body), nil)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		// Not the pass it waits for: refused, the run as it was.
		{name: "an earlier pass's suspension that does not decode", code: subjects.CodeMalformed, status: subjects.RunResuming,
			setup: func(e *env) {
				e.suspend("r1", 0, open)
				e.decide("r1", "", resolve("d1", "open", ""))
			},
			send: func(e *env) (*jetstream.Delivery, error) {
				body := fmt.Sprintf(`{"version":1,"runId":"r1","agent":%q,"pass":0,"interrupts":[{"reason":"tool_call"}]}`, agent)
				m := e.msg(e.must(e.ns.Suspended(agent, "r1")), []byte(body), nil)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "another agent's outcome", code: subjects.CodeWrongAgent, status: subjects.RunSuspended,
			setup: func(e *env) { e.suspend("r1", 0, open) },
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.msg(e.must(e.ns.Completed("other", "r1")),
					subjects.Completion{PassRef: subjects.PassRef{Version: subjects.Version, RunID: "r1", Agent: "other", Pass: 1}}, nil)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "unsafe response schema", code: subjects.CodeSchemaUnsafe,
			send: func(e *env) (*jetstream.Delivery, error) {
				unsafe := subjects.Interrupt{ID: "x", Reason: subjects.ReasonToolCall,
					ResponseSchema: json.RawMessage(`{"pattern":"` + strings.Repeat("(a+)+", 2000) + `"}`)}
				m := e.suspension("r1", 0, unsafe)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "stale pass", code: subjects.CodeStalePass, kept: true, status: subjects.RunSuspended,
			setup: func(e *env) { e.suspend("r1", 0, open) },
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.completion("r1", 0)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "suspension whose decisions the record could not take", code: subjects.CodeRecordTooLarge, status: subjects.RunFailed,
			setup: func(e *env) { e.st.SetMaxRecord(8 << 10) },
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.suspension("r1", 0, open)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "completion the record cannot take", code: subjects.CodeRecordTooLarge, status: subjects.RunFailed,
			failure: "too large to record",
			setup: func(e *env) {
				e.suspend("r1", 0, open)
				e.decide("r1", "", resolve("d1", "open", ""))
				e.st.SetMaxRecord(int64(len(mustJSON(e.t, e.record("r1")))) + 400)
			},
			send: func(e *env) (*jetstream.Delivery, error) {
				c := subjects.Completion{PassRef: ref("r1", 1), Result: json.RawMessage(`"` + strings.Repeat("x", 1000) + `"`)}
				m := e.msg(e.must(e.ns.Completed(agent, "r1")), c, nil)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "expiry the record cannot take", code: subjects.CodeRecordTooLarge, kept: true, status: subjects.RunSuspended,
			setup: func(e *env) {
				e.suspend("r1", 0, expiring)
				e.st.SetMaxRecord(int64(len(mustJSON(e.t, e.record("r1")))) + 10)
				e.now = deadline
			},
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.timer("r1", "expiring", subjects.TimerExpire)
				return m, e.co.handleTimer(ctx(e.t), m)
			}},
		{name: "observation on a subject of another kind", code: subjects.CodeInvalidSubject, run: subjects.NoRun,
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.msg(e.must(e.ns.Events("r1", subjects.EventNotificationFailed)), subjects.Event{Detail: "x"}, nil)
				return m, e.co.handleObserved(ctx(e.t), m)
			}},
		{name: "completion the server sent for another user (a direct get's answer)", code: subjects.CodeNotAllowed,
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.completion("r1", 0)
				m.Header["Nats-Stream"] = []string{"INTERLOCK_RUNS"}
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "suspension with no message id (a direct get's answer without headers)", code: subjects.CodeNotAllowed,
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.suspension("r1", 0, open)
				m.Header = nil
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "observation with the server's headers", code: subjects.CodeNotAllowed, run: subjects.NoRun,
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.msg(e.must(e.ns.Observed("r1", subjects.EventNotificationFailed)), subjects.Event{Detail: "x"},
					jetstream.Header{"Nats-Sequence": {"7"}})
				return m, e.co.handleObserved(ctx(e.t), m)
			}},
		{name: "a replay's question nobody may answer", code: subjects.CodePolicyUnsatisfiable, status: subjects.RunFailed,
			failure: "at most 1",
			setup: func(e *env) {
				e.suspend("r1", 0, open)
				e.decide("r1", "", resolve("d1", "open", ""))
			},
			send: func(e *env) (*jetstream.Delivery, error) {
				quorum := subjects.Interrupt{ID: "q", Reason: subjects.ReasonConfirmation, Approvers: []string{"ada"},
					Policy: &subjects.Policy{Approvals: 2}}
				s := subjects.Suspension{PassRef: ref("r1", 1), Interrupts: []subjects.Interrupt{quorum}}
				m := e.msg(e.must(e.ns.Suspended(agent, "r1")), subjects.Versioned(&s), nil)
				e.st.Suspended("r1", m.Sequence)
				return m, e.co.handleOutcome(ctx(e.t), m)
			}},
		{name: "observation not JSON", code: subjects.CodeMalformed,
			send: func(e *env) (*jetstream.Delivery, error) {
				m := e.msg(e.must(e.ns.Observed("r1", subjects.EventNotificationFailed)), []byte(`[`), nil)
				return m, e.co.handleObserved(ctx(e.t), m)
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{})
			if tc.setup != nil {
				tc.setup(e)
			}
			m, err := tc.send(e)
			if tc.kept {
				require.NoError(t, err)
			} else {
				require.True(t, jetstream.DeadLettered(err), "dead-lettered, not retried: %v", err)
			}
			run := tc.run
			if run == "" {
				run = "r1"
			}
			var codes []subjects.Code
			for _, ev := range e.about(run, m.Subject) {
				if ev.Type == subjects.EventInputRejected {
					codes = append(codes, ev.Code)
				}
			}
			assert.Equal(t, []subjects.Code{tc.code}, codes, "audited once with its code")
			if tc.status != "" {
				assert.Equal(t, tc.status, e.record("r1").Status)
			}
			if tc.failure != "" {
				assert.Contains(t, e.record("r1").Error, tc.failure)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return data
}

// TestObservationRecorded: another role's observation is recorded as an
// event of its run, its type and time from the subject and the stream.
func TestObservationRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.suspend("r1", 0, open)
	m := e.msg(e.must(e.ns.Observed("r1", subjects.EventNotificationFailed)),
		subjects.Event{Version: subjects.Version, Detail: "webhook down", Agent: agent, Type: subjects.EventCompleted}, nil)
	require.NoError(t, e.co.handleObserved(ctx(t), m))
	require.NoError(t, e.co.handleObserved(ctx(t), again(m)))
	evs := e.eventsOf("r1", subjects.EventNotificationFailed)
	require.Len(t, evs, 1, "once per observation")
	assert.Equal(t, "webhook down", evs[0].Detail)
}

// TestObservationOfUnknownRun: an observation about a run with no record
// (a refusal of a request naming a made-up run id, which whoever sends the
// gateway refused requests chooses) is filed under no run, naming the id
// it claimed, once delivered for about half a minute (a record may lag
// its suspension). Before, it made that run id a trail, before any run had it.
func TestObservationOfUnknownRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	m := e.msg(e.must(e.ns.Observed("made-up", subjects.EventAccessRefused)),
		subjects.Event{Version: subjects.Version, Code: subjects.CodeBadRequest, Detail: "unknown field", Identity: "bob"}, nil)
	m.Deliveries = 1
	require.Error(t, e.co.handleObserved(ctx(t), m), "the record may lag: delivered again")
	assert.Empty(t, e.events(subjects.NoRun))
	m.Deliveries = observedRecordTries
	require.NoError(t, e.co.handleObserved(ctx(t), m))
	assert.Empty(t, e.events("made-up"), "no trail for a run that does not exist")
	evs := e.eventsOf(subjects.NoRun, subjects.EventAccessRefused)
	require.Len(t, evs, 1)
	assert.Contains(t, evs[0].Detail, "made-up")
	assert.Contains(t, evs[0].Detail, "unknown field")
	assert.Equal(t, "bob", evs[0].Identity)
}

// TestTimers covers the timer input: one that fires early comes back,
// a broken one is dead-lettered, a reminder and an escalation notify, and
// a timer of a decided interrupt does nothing.
func TestTimers(t *testing.T) {
	t.Parallel()

	t.Run("early", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Config{})
		e.suspend("r1", 0, expiring)
		e.now = deadline.Add(-300 * time.Millisecond)
		d, retry := jetstream.RetryDelay(e.co.handleTimer(ctx(t), e.timer("r1", "expiring", subjects.TimerExpire)))
		require.True(t, retry)
		assert.Equal(t, 300*time.Millisecond, d)
		assert.Equal(t, subjects.RunSuspended, e.record("r1").Status)
	})

	t.Run("broken", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Config{})
		err := e.co.handleTimer(ctx(t), e.msg(e.must(e.ns.TimerDue("r1")), []byte(`{`), nil))
		assert.True(t, jetstream.DeadLettered(err), "%v", err)
	})

	t.Run("expiry replays", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Config{})
		e.suspend("r1", 0, expiring)
		e.now = deadline
		require.NoError(t, e.co.handleTimer(ctx(t), e.timer("r1", "expiring", subjects.TimerExpire)))
		rec := e.record("r1")
		assert.Equal(t, subjects.RunResuming, rec.Status)
		assert.Equal(t, subjects.ExpiryApprover, rec.Interrupts[0].Decision.Approver)
		assert.Len(t, e.messages(subjects.KindWork), 1)
		notices := e.messages(subjects.KindExpired)
		require.Len(t, notices, 1)
		assert.Equal(t, e.co.ids.Sign("r1:"+string(subjects.KindExpired)+":"+expiryTimerName(t, e)), notices[0].MsgID,
			"the notice's id is signed")
	})

	t.Run("reminder and escalation", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Config{})
		in := expiring
		in.RemindBeforeSeconds = []int{600}
		in.OnExpiry = &subjects.ExpiryPolicy{Action: subjects.ExpiryEscalate, ExtendSeconds: 3600, Approvers: []string{"boss"}}
		e.suspend("r1", 0, in)
		e.now = deadline.Add(-10 * time.Minute)
		require.NoError(t, e.co.handleTimer(ctx(t), e.timer("r1", "expiring", subjects.TimerRemind)))
		assert.Len(t, e.messages(subjects.KindReminder), 1)
		e.now = deadline
		require.NoError(t, e.co.handleTimer(ctx(t), e.timer("r1", "expiring", subjects.TimerExpire)))
		assert.Len(t, e.messages(subjects.KindEscalated), 1)
		pending, _, err := e.st.PendingPage(ctx(t), 0, 10)
		require.NoError(t, err)
		require.Len(t, pending, 1)
		assert.Equal(t, 1, pending[0].Escalations)
		assert.Equal(t, subjects.RunSuspended, e.record("r1").Status)
	})

	t.Run("decided first", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Config{})
		e.suspend("r1", 0, expiring, open)
		e.decide("r1", "", resolve("d1", "expiring", ""))
		before := e.state("r1")
		e.now = deadline
		require.NoError(t, e.co.handleTimer(ctx(t), e.timer("r1", "expiring", subjects.TimerExpire)))
		assert.Equal(t, before, e.state("r1"))
	})
}

// expiryTimerName is the name of r1's expire timer.
func expiryTimerName(t *testing.T, e *env) string {
	for _, m := range e.messages(subjects.KindTimers) {
		var tm subjects.Timer
		require.NoError(t, json.Unmarshal(m.Data, &tm))
		if tm.Kind == subjects.TimerExpire {
			return tm.Name
		}
	}
	t.Fatal("no expire timer")
	return ""
}

// TestRefusedOutcomeAndObservationBothAudited: an outcome and an
// observation of one run, each refused, at the same sequence of their own
// streams. Both entries are kept: before, both were named seq<N>, and the
// second was dropped as a duplicate (a notifier, which may publish
// observations, could drop the audit of a refused outcome on purpose).
func TestRefusedOutcomeAndObservationBothAudited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	e.suspend("r1", 0, open)
	obs := e.msg(e.must(e.ns.Observed("r1", subjects.EventNotificationFailed)), []byte(`[`), nil)
	out := e.msg(e.must(e.ns.Suspended(agent, "r1")), []byte(`{`), nil)
	obs.Sequence, out.Sequence = 40, 40
	require.Error(t, e.co.handleObserved(ctx(t), obs))
	require.Error(t, e.co.handleOutcome(ctx(t), out))
	assert.Len(t, e.eventsOf("r1", subjects.EventInputRejected), 2, "each refused input has its entry")
}
