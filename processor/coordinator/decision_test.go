package coordinator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// The interrupts of run r1's first pass in the decision tables.
var (
	deadline  = t0.Add(time.Hour)
	open      = subjects.Interrupt{ID: "open", Reason: subjects.ReasonToolCall}
	second    = subjects.Interrupt{ID: "second", Reason: subjects.ReasonToolCall}
	aliceOnly = subjects.Interrupt{ID: "alice-only", Reason: subjects.ReasonToolCall, Approvers: []string{"alice"}}
	schemaed  = subjects.Interrupt{ID: "schemaed", Reason: subjects.ReasonToolCall,
		ResponseSchema: json.RawMessage(`{"type":"object","required":["amount"],"properties":{"amount":{"type":"number","maximum":100}}}`)}
	expiring = subjects.Interrupt{ID: "expiring", Reason: subjects.ReasonToolCall, ExpiresAt: &deadline}
)

// TestDecisionRejections covers every code a decision is rejected with: the
// verdict is recorded (and replied), the record does not change.
func TestDecisionRejections(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		// setup runs after r1 suspended on every interrupt above.
		setup func(e *env)
		// send is the decision under test.
		send func(e *env) *jetstream.Delivery
		run  string // where its verdict is filed; default r1
		code subjects.Code
		// detail is in the verdict's detail, when set.
		detail string
		// parsed: the body decoded, so the verdict names its decision and
		// interrupt (d1, open) for the sender to match it to what it sent.
		parsed bool
		// notPublished: not a client's publish (an answer the server sent
		// to the subject), so no verdict goes to its reply subject.
		notPublished bool
	}{
		{name: "subject of another kind", code: subjects.CodeInvalidSubject, run: subjects.NoRun,
			send: func(e *env) *jetstream.Delivery {
				return e.msg(e.must(e.ns.Completed(agent, "r1")), resolve("d1", "open", ""), nil)
			}},
		{name: "the server's answer to a direct get, sent to the resume subject", code: subjects.CodeNotAllowed,
			detail: "Nats-Stream", notPublished: true, send: func(e *env) *jetstream.Delivery {
				m := e.decision("r1", "", resolve("d1", "open", ""), "")
				m.Header["Nats-Stream"] = []string{"INTERLOCK_RUNS"}
				return m
			}},
		{name: "no message id (a direct get's answer without headers)", code: subjects.CodeNotAllowed,
			detail: "no Nats-Msg-Id", notPublished: true, send: func(e *env) *jetstream.Delivery {
				m := e.decision("r1", "", resolve("d1", "open", ""), "")
				delete(m.Header, jetstream.HeaderMsgID)
				return m
			}},
		{name: "resume subject of a run with a record, too many tokens", code: subjects.CodeInvalidSubject,
			send: func(e *env) *jetstream.Delivery {
				return e.msg(e.must(e.ns.ResumeAs("r1", "alice"))+".extra", resolve("d1", "open", ""), nil)
			}},
		{name: "not JSON", code: subjects.CodeMalformed,
			send: func(e *env) *jetstream.Delivery {
				return e.msg(e.must(e.ns.Resume("r1")), []byte(`{"decisionId":`), nil)
			}},
		{name: "no version", code: subjects.CodeMalformed, parsed: true,
			send: func(e *env) *jetstream.Delivery {
				return e.msg(e.must(e.ns.Resume("r1")), []byte(`{"decisionId":"d1","interruptId":"open","status":"resolved"}`), nil)
			}},
		{name: "unknown status", code: subjects.CodeMalformed, parsed: true,
			send: func(e *env) *jetstream.Delivery {
				return e.msg(e.must(e.ns.Resume("r1")), []byte(`{"version":1,"decisionId":"d1","interruptId":"open","status":"approved"}`), nil)
			}},
		{name: "null payload", code: subjects.CodeMalformed, parsed: true,
			send: func(e *env) *jetstream.Delivery {
				return e.msg(e.must(e.ns.Resume("r1")), []byte(`{"version":1,"decisionId":"d1","interruptId":"open","status":"resolved","payload":null}`), nil)
			}},
		{name: "unknown field", code: subjects.CodeMalformed, parsed: true,
			send: func(e *env) *jetstream.Delivery {
				return e.msg(e.must(e.ns.Resume("r1")), []byte(`{"version":1,"decisionId":"d1","interruptId":"open","status":"resolved","paylod":1}`), nil)
			}},
		// Invalid UTF-8 in a payload or metadata was recorded as sent and
		// put into the replay, which the Python and TypeScript workers
		// refused: the run waited for good.
		{name: "invalid UTF-8", code: subjects.CodeMalformed, parsed: true,
			send: func(e *env) *jetstream.Delivery {
				return e.msg(e.must(e.ns.Resume("r1")), []byte("{\"version\":1,\"decisionId\":\"d1\",\"interruptId\":\"open\",\"status\":\"resolved\",\"metadata\":{\"n\":\"\xff\"}}"), nil)
			}},
		// Nested past what a worker in every language reads once the
		// coordinator carries it in a work item.
		{name: "nested deeper than a decision may", code: subjects.CodeMalformed, parsed: true, detail: "nested deeper than 64",
			send: func(e *env) *jetstream.Delivery {
				return e.msg(e.must(e.ns.Resume("r1")), []byte(`{"version":1,"decisionId":"d1","interruptId":"open","status":"resolved","payload":`+
					strings.Repeat("[", 64)+strings.Repeat("]", 64)+`}`), nil)
			}},
		{name: "unsupported version", code: subjects.CodeUnsupportedVersion, parsed: true,
			send: func(e *env) *jetstream.Delivery {
				d := resolve("d1", "open", "")
				d.Version = 3 // versions 1 and 2 are read
				return e.decision("r1", "", d, "")
			}},
		{name: "over the decision size", code: subjects.CodeTooLarge,
			send: func(e *env) *jetstream.Delivery {
				return e.decision("r1", "", resolve("d1", "open", `"`+strings.Repeat("x", subjects.MaxDecisionSize)+`"`), "")
			}},
		{name: "body names another approver", code: subjects.CodeNotAllowed,
			send: func(e *env) *jetstream.Delivery {
				d := resolve("d1", "open", "")
				d.Approver = "alice"
				return e.decision("r1", "bob", d, "")
			}},
		// On the anonymous subject the body may not name anyone: the
		// decision was recorded under the name it claimed (the replay, the
		// inbox and the chat cards showed alice deciding).
		{name: "anonymous body names an approver", code: subjects.CodeNotAllowed, detail: "anonymous decision names approver alice",
			send: func(e *env) *jetstream.Delivery {
				d := resolve("d1", "open", "")
				d.Approver = "alice"
				return e.decision("r1", "", d, "")
			}},
		{name: "the expiry's identity claimed", code: subjects.CodeNotAllowed, detail: "reserved",
			send: func(e *env) *jetstream.Delivery {
				d := resolve("d1", "open", "")
				d.Approver = subjects.ExpiryApprover
				return e.decision("r1", "", d, "")
			}},
		{name: "not an approver of the interrupt", code: subjects.CodeNotAllowed,
			send: func(e *env) *jetstream.Delivery { return e.decision("r1", "bob", resolve("d1", "alice-only", ""), "") }},
		{name: "anonymous on an interrupt with approvers", code: subjects.CodeNotAllowed,
			send: func(e *env) *jetstream.Delivery { return e.decision("r1", "", resolve("d1", "alice-only", ""), "") }},
		{name: "another identity's decision id", code: subjects.CodeNotAllowed,
			setup: func(e *env) { e.decide("r1", "bob", resolve("d1", "open", "")) },
			send:  func(e *env) *jetstream.Delivery { return e.decision("r1", "alice", resolve("d1", "open", ""), "") }},
		{name: "unknown run (filed under no run)", code: subjects.CodeUnknownRun, run: subjects.NoRun,
			send: func(e *env) *jetstream.Delivery { return e.decision("nope", "", resolve("d1", "open", ""), "") }},
		{name: "a decision id used before with another body", code: subjects.CodeDecisionIDReused,
			setup: func(e *env) { e.decide("r1", "bob", resolve("d1", "open", `1`)) },
			send:  func(e *env) *jetstream.Delivery { return e.decision("r1", "bob", resolve("d1", "open", `2`), "") }},
		{name: "unknown interrupt", code: subjects.CodeUnknownInterrupt,
			send: func(e *env) *jetstream.Delivery { return e.decision("r1", "", resolve("d1", "nope", ""), "") }},
		{name: "decided before by another decision", code: subjects.CodeAlreadyDecided,
			setup: func(e *env) { e.decide("r1", "", resolve("d1", "open", "")) },
			send:  func(e *env) *jetstream.Delivery { return e.decision("r1", "", cancelled("d2", "open"), "") }},
		{name: "resolved after the deadline", code: subjects.CodeExpired,
			setup: func(e *env) { e.now = deadline },
			send:  func(e *env) *jetstream.Delivery { return e.decision("r1", "", resolve("d1", "expiring", ""), "") }},
		{name: "resolved after the expiry closed it", code: subjects.CodeExpired,
			setup: func(e *env) {
				e.now = deadline
				require.NoError(e.t, e.co.handleTimer(ctx(e.t), e.timer("r1", "expiring", subjects.TimerExpire)))
			},
			send: func(e *env) *jetstream.Delivery { return e.decision("r1", "", resolve("d1", "expiring", ""), "") }},
		{name: "payload against the schema: a required field missing", code: subjects.CodeSchemaMismatch,
			send: func(e *env) *jetstream.Delivery { return e.decision("r1", "", resolve("d1", "schemaed", `{}`), "") }},
		{name: "payload against the schema: a field of the wrong type", code: subjects.CodeSchemaMismatch,
			send: func(e *env) *jetstream.Delivery {
				return e.decision("r1", "", resolve("d1", "schemaed", `{"amount":"ten"}`), "")
			}},
		{name: "payload against the schema: over the maximum", code: subjects.CodeSchemaMismatch,
			send: func(e *env) *jetstream.Delivery {
				return e.decision("r1", "", resolve("d1", "schemaed", `{"amount":1000}`), "")
			}},
		{name: "payload against the schema: none", code: subjects.CodeSchemaMismatch,
			send: func(e *env) *jetstream.Delivery { return e.decision("r1", "", resolve("d1", "schemaed", ""), "") }},
		{name: "schema check over its budget", code: subjects.CodeSchemaBudget, cfg: Config{SchemaBudget: time.Nanosecond},
			send: func(e *env) *jetstream.Delivery {
				return e.decision("r1", "", resolve("d1", "schemaed", `{"amount":1}`), "")
			}},
		{name: "the record would not take it", code: subjects.CodeRecordTooLarge,
			setup: func(e *env) {
				rec, _, err := e.st.Run(ctx(e.t), "r1")
				require.NoError(e.t, err)
				data, err := json.Marshal(rec)
				require.NoError(e.t, err)
				e.st.SetMaxRecord(int64(len(data)) + 10)
			},
			send: func(e *env) *jetstream.Delivery {
				return e.decision("r1", "", resolve("d1", "open", `{"note":"a payload the record has no room for"}`), "")
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tc.cfg)
			e.suspend("r1", 0, open, second, aliceOnly, schemaed, expiring)
			if tc.setup != nil {
				tc.setup(e)
			}
			before := e.state("r1")
			m := tc.send(e)
			m.Header[jetstream.HeaderReplyTo] = []string{subjects.InboxPrefix(approverOf(e, m)) + ".reply"}
			require.NoError(t, e.co.handleDecision(ctx(t), m), "a rejection is answered, not retried")
			run := tc.run
			if run == "" {
				run = "r1"
			}
			v := e.verdictOf(run, m)
			assert.Equal(t, subjects.OutcomeRejected, v.Outcome)
			assert.Equal(t, tc.code, v.Code, v.Detail)
			assert.NotEmpty(t, v.Detail)
			assert.Contains(t, v.Detail, tc.detail)
			if tc.parsed {
				assert.Equal(t, "d1", v.DecisionID, "the verdict names the decision sent")
				assert.Equal(t, "open", v.InterruptID)
			}
			if tc.notPublished {
				// Not a client's publish: audited, and nobody's inbox is
				// sent a verdict about it.
				assert.Empty(t, e.nats.repliesTo(m.Header.Get(jetstream.HeaderReplyTo)), "no verdict replied")
			} else {
				assert.Equal(t, []subjects.Verdict{*v}, e.nats.repliesTo(m.Header.Get(jetstream.HeaderReplyTo)), "the verdict is replied")
			}
			after := e.state("r1")
			assert.Equal(t, before.Runs, after.Runs, "the record is unchanged")
			assert.Equal(t, before.Pending, after.Pending, "the pending index is unchanged")
			assert.Equal(t, before.Messages, after.Messages, "nothing is queued")
		})
	}
}

// approverOf is the identity m was published as.
func approverOf(e *env, m *jetstream.Delivery) string {
	a, err := e.ns.Parse(m.Subject)
	if err != nil {
		return ""
	}
	return a.Approver
}

// TestDecisionAnswers covers the decisions that are not rejected: accepted
// (the last one of a pass queues the replay), duplicate, the no-op cancel
// of an expired interrupt, and a reply subject outside the sender's inbox.
func TestDecisionAnswers(t *testing.T) {
	t.Parallel()

	t.Run("accepted, then the last one replays", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Config{})
		e.suspend("r1", 0, open, second)
		inbox := subjects.InboxPrefix("alice") + ".1"
		m := e.decision("r1", "alice", resolve("d1", "open", `{"ok":1}`), inbox)
		require.NoError(t, e.co.handleDecision(ctx(t), m))
		v := e.verdictOf("r1", m)
		assert.Equal(t, subjects.OutcomeAccepted, v.Outcome)
		assert.False(t, v.Replay)
		assert.Equal(t, "alice", v.Approver)
		assert.Len(t, e.nats.repliesTo(inbox), 1)
		assert.Empty(t, e.messages(subjects.KindWork), "the pass still waits")

		m = e.decision("r1", "alice", cancelled("d2", "second"), "")
		require.NoError(t, e.co.handleDecision(ctx(t), m))
		assert.True(t, e.verdictOf("r1", m).Replay)
		work := e.messages(subjects.KindWork)
		require.Len(t, work, 1)
		assert.Equal(t, e.co.ids.Sign(subjects.WorkMsgID("r1", 1)), work[0].MsgID, "the replay's id is signed")
		var w subjects.Work
		require.NoError(t, json.Unmarshal(work[0].Data, &w))
		assert.Len(t, w.Decisions, 2)
		assert.Equal(t, subjects.RunResuming, e.record("r1").Status)
		pending, err := e.st.PendingCount(ctx(t))
		require.NoError(t, err)
		assert.Zero(t, pending)
	})

	t.Run("duplicate", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Config{})
		e.suspend("r1", 0, open, second)
		e.decide("r1", "alice", resolve("d1", "open", ""))
		before := e.state("r1")
		m := e.decision("r1", "alice", resolve("d1", "open", ""), "")
		require.NoError(t, e.co.handleDecision(ctx(t), m))
		assert.Equal(t, subjects.OutcomeDuplicate, e.verdictOf("r1", m).Outcome)
		assert.Equal(t, before.Runs, e.state("r1").Runs)
	})

	t.Run("cancel after expiry changes nothing", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Config{})
		e.suspend("r1", 0, expiring, open)
		e.now = deadline
		require.NoError(t, e.co.handleTimer(ctx(t), e.timer("r1", "expiring", subjects.TimerExpire)))
		before := e.state("r1")
		m := e.decision("r1", "", cancelled("d1", "expiring"), "")
		require.NoError(t, e.co.handleDecision(ctx(t), m))
		v := e.verdictOf("r1", m)
		assert.Equal(t, subjects.OutcomeAccepted, v.Outcome)
		assert.Contains(t, v.Detail, "already expired")
		assert.Equal(t, before.Runs, e.state("r1").Runs)
	})

	t.Run("accepted where the rejections are not", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name     string
			at       time.Time
			approver string
			d        subjects.Decision
		}{
			{"a cancel needs no payload that fits the schema", t0, "", cancelled("d1", "schemaed")},
			{"a listed approver", t0, "alice", resolve("d1", "alice-only", "")},
			{"a cancel after the deadline, before the expiry fired", deadline, "", cancelled("d1", "expiring")},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, Config{})
				e.suspend("r1", 0, open, aliceOnly, schemaed, expiring)
				e.now = tc.at
				m := e.decision("r1", tc.approver, tc.d, "")
				require.NoError(t, e.co.handleDecision(ctx(t), m))
				assert.Equal(t, subjects.OutcomeAccepted, e.verdictOf("r1", m).Outcome)
				var in *subjects.InterruptState
				rec := e.record("r1")
				for i := range rec.Interrupts {
					if rec.Interrupts[i].ID == tc.d.InterruptID {
						in = &rec.Interrupts[i]
					}
				}
				require.NotNil(t, in)
				require.NotNil(t, in.Decision, "recorded")
				assert.Equal(t, tc.d.Status, in.Decision.Status)
			})
		}
	})

	t.Run("reply outside the sender's inbox", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Config{})
		e.suspend("r1", 0, open)
		elsewhere := subjects.InboxPrefix("bob") + ".1"
		m := e.decision("r1", "alice", resolve("d1", "open", ""), elsewhere)
		require.NoError(t, e.co.handleDecision(ctx(t), m))
		assert.Empty(t, e.nats.repliesTo(elsewhere))
		var codes []subjects.Code
		for _, ev := range e.about("r1", m.Subject) {
			codes = append(codes, ev.Code)
		}
		assert.Contains(t, codes, subjects.CodeReplyRefused)
		assert.Equal(t, subjects.OutcomeAccepted, e.verdictOf("r1", m).Outcome, "the decision stands")
	})
}

// TestDecisionBeforeItsSuspension: a decision whose suspension is in the
// runs stream but not yet recorded comes back later (with backoff), and is
// accepted once the suspension is recorded; a run that ended waits for no
// suspension.
func TestDecisionBeforeItsSuspension(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	s := e.suspension("r1", 0, open)
	m := e.decision("r1", "", resolve("d1", "open", ""), "")
	err := e.co.handleDecision(ctx(t), m)
	d, retry := jetstream.RetryDelay(err)
	require.True(t, retry, "%v", err)
	assert.Equal(t, retryDelay(1), d)
	assert.Empty(t, e.about("r1", m.Subject), "nothing recorded while it waits")

	require.NoError(t, e.co.handleOutcome(ctx(t), s))
	require.NoError(t, e.co.handleDecision(ctx(t), again(m)))
	assert.Equal(t, subjects.OutcomeAccepted, e.verdictOf("r1", m).Outcome)

	t.Run("the run ended", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Config{})
		e.suspend("r1", 0, open)
		e.decide("r1", "", resolve("d0", "open", ""))
		require.NoError(t, e.co.handleOutcome(ctx(t), e.completion("r1", 1)))
		e.suspension("r1", 1, second) // in the stream after the run completed: never recorded
		m := e.decision("r1", "", resolve("d1", "second", ""), "")
		require.NoError(t, e.co.handleDecision(ctx(t), m))
		assert.Equal(t, subjects.CodeUnknownInterrupt, e.verdictOf("r1", m).Code)
	})

	t.Run("retry backoff", func(t *testing.T) {
		t.Parallel()
		assert.Equal(t, 100*time.Millisecond, retryDelay(1))
		assert.Equal(t, 2*time.Second, retryDelay(50))
	})
}
