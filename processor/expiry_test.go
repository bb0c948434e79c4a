package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/internal/wireschema"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/subjects"
)

// gated is an agent with one interrupt built by req; it reports how the
// interrupt ended.
func gated(req func() Request) AgentFunc {
	return func(ctx context.Context, _ json.RawMessage) (any, error) {
		d, err := Interrupt(ctx, req())
		var ce *CancelledError
		if errors.As(err, &ce) {
			return map[string]any{"cancelled": ce.Reason, "by": ce.Approver}, nil
		}
		if err != nil {
			return nil, err
		}
		return map[string]any{"payload": d.Payload, "by": d.Approver}, nil
	}
}

// timersIdle waits until every timer has fired and been handled.
func (h *harness) timersIdle() {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		st, err := h.admin.ConsumerState(h.ctx(), jetstream.StreamTimers, "coordinator_timers")
		if err != nil {
			return false
		}
		n, err := h.admin.MsgCount(h.ctx(), jetstream.StreamTimers)
		return err == nil && st.Pending == 0 && st.AckPending == 0 && n == 0
	}, waitLimit, 20*time.Millisecond, "timers still pending")
}

// trailTypes are the types of run's events once its completion is among
// them: the run's history, which its record no longer keeps.
func (h *harness) trailTypes(run string) []subjects.EventType {
	h.t.Helper()
	h.waitEvents(run, subjects.EventCompleted, 1)
	evs, err := h.client.Events(h.ctx(), run)
	require.NoError(h.t, err)
	var out []subjects.EventType
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

func TestExpiryCancelsByDefault(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]AgentFunc{"a": gated(func() Request { return Request{Timeout: time.Second} })})
	run := h.start("a", nil)
	rec := h.waitFor(run, Finished)
	assert.JSONEq(t, `{"cancelled":"expired","by":"interlock:expiry"}`, string(rec.Result), "fail closed: the body sees an expiry")
	// The expired event is stored with the expiry's decision, before the
	// replay that decision queues, so the trail reads in order.
	assert.Equal(t, []subjects.EventType{subjects.EventSuspended, subjects.EventDecisionAccepted, subjects.EventExpired,
		subjects.EventCompleted}, h.trailTypes(run))
	assert.Empty(t, rec.History, "the record keeps no history: the trail is it")
	assert.Regexp(t, `^expires \S+, then cancel$`, h.events(run, subjects.EventSuspended)[0].Detail,
		"the suspended event says what its deadline's timers do")
	h.timersIdle()
}

func TestExpiryResolvesWithTheAgentsDefault(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]AgentFunc{"a": gated(func() Request {
		return Request{Timeout: time.Second, ResponseSchema: map[string]any{"type": "object"},
			OnExpiry: Expiry{Action: subjects.ExpiryResolve, Payload: map[string]any{"amount": 0}}}
	})})
	run := h.start("a", nil)
	rec := h.waitFor(run, Finished)
	assert.JSONEq(t, `{"payload":{"amount":0},"by":"interlock:expiry"}`, string(rec.Result))
}

func TestExpiryResolvePayloadMustFitSchema(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]AgentFunc{"a": gated(func() Request {
		return Request{Timeout: time.Second, ResponseSchema: map[string]any{"type": "object"},
			OnExpiry: Expiry{Action: subjects.ExpiryResolve, Payload: "yes"}}
	})})
	rec := h.waitFor(h.start("a", nil), Finished)
	assert.Equal(t, subjects.RunFailed, rec.Status)
	assert.Contains(t, rec.Error, "onExpiry payload does not satisfy responseSchema")
}

func TestExpiryEscalates(t *testing.T) {
	t.Parallel()
	// The run whose escalation is decided ("decide") gets 10 s after the
	// escalation, time for the test's decision to arrive on a loaded
	// machine (2 s could be overtaken, as in TestDecisionAroundTheDeadline);
	// the one left to expire gets 2 s.
	extend := map[string]time.Duration{"decide": 10 * time.Second, "expire": 2 * time.Second}
	escalating := func(ctx context.Context, in json.RawMessage) (any, error) {
		var which string
		if err := json.Unmarshal(in, &which); err != nil {
			return nil, err
		}
		return gated(func() Request {
			return Request{Timeout: time.Second, Approvers: []string{"alice"},
				OnExpiry: Expiry{Action: subjects.ExpiryEscalate, Approvers: []string{"boss"}, Extend: extend[which]}}
		})(ctx, in)
	}
	h := newHarness(t, map[string]AgentFunc{"a": escalating})

	// Escalated, then decided by the escalation approver.
	run := h.start("a", "decide")
	first := h.suspendedAtPass(run, 0).Pending()[0]
	escalated := h.waitEvents(run, subjects.EventEscalated, 1)
	rec, err := h.client.Run(h.ctx(), run)
	require.NoError(t, err)
	st := rec.Pending()[0]
	assert.Equal(t, 1, st.Escalations)
	assert.Equal(t, "escalation 1 of 1; expires "+st.ExpiresAt.Format(time.RFC3339)+", then cancel", escalated[0].Detail,
		"the escalated event says what the record's history said")
	assert.Equal(t, []string{"alice", "boss"}, st.Approvers)
	assert.Equal(t, first.ExpiresAt.Add(extend["decide"]), *st.ExpiresAt)
	v, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: st.ID, Status: subjects.StatusResolved,
		Payload: "ok", Approver: "boss"})
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	assert.JSONEq(t, `{"payload":"ok","by":"boss"}`, string(h.waitFor(run, Finished).Result))

	// Escalated once, then expired.
	run = h.start("a", "expire")
	rec = h.waitFor(run, Finished)
	assert.JSONEq(t, `{"cancelled":"expired","by":"interlock:expiry"}`, string(rec.Result))
	assert.Len(t, h.waitEvents(run, subjects.EventEscalated, 1), 1)
	assert.Len(t, h.waitEvents(run, subjects.EventExpired, 1), 1)
}

func TestDecisionAroundTheDeadline(t *testing.T) {
	t.Parallel()
	t.Run("a moment before", func(t *testing.T) {
		t.Parallel()
		// The boundary itself (a decision at, before and after the
		// deadline) is decided on a fixed clock in the coordinator's table
		// tests (decision_test.go). Here the server's expiry timer fires
		// after an accepted decision and must change nothing; the deadline
		// only has to leave the decision time to arrive. 1.5 s did not on a
		// loaded machine (the decision came after it, once, in 16 s), so it
		// is 10 s: the subtest runs in parallel and waits for the timer.
		h := newHarness(t, map[string]AgentFunc{"a": gated(func() Request { return Request{Timeout: 10 * time.Second} })})
		run := h.start("a", nil)
		rec := h.suspendedAtPass(run, 0)
		h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, "in time")
		assert.JSONEq(t, `{"payload":"in time","by":""}`, string(h.waitFor(run, Finished).Result))
		h.timersIdle() // the expiry fired, and did nothing
		assert.Empty(t, h.events(run, subjects.EventExpired))
		assert.Len(t, h.events(run, subjects.EventDecisionAccepted), 1)
	})
	t.Run("a moment after", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, map[string]AgentFunc{"a": gated(func() Request { return Request{Timeout: time.Second} })})
		run := h.start("a", nil)
		id := h.suspendedAtPass(run, 0).Pending()[0].ID
		h.waitEvents(run, subjects.EventExpired, 1)
		v, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: id, Status: subjects.StatusResolved, Payload: "late"})
		assertRejected(t, h, v, err, subjects.CodeExpired)
		v, err = h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: id, Status: subjects.StatusCancelled})
		require.NoError(t, err, "a cancel is still accepted after expiry")
		assert.Equal(t, subjects.OutcomeAccepted, v.Outcome)
		assert.Contains(t, v.Detail, "already expired")
		assert.JSONEq(t, `{"cancelled":"expired","by":"interlock:expiry"}`, string(h.waitFor(run, Finished).Result))
	})
}

func TestTimerSurvivesCoordinatorRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]AgentFunc{"a": gated(func() Request { return Request{Timeout: time.Second} })})
	run := h.start("a", nil)
	st := h.suspendedAtPass(run, 0).Pending()[0]
	_ = h.co.Stop(context.Background())
	require.Eventually(t, func() bool { return time.Now().After(st.ExpiresAt.Add(time.Second)) },
		10*time.Second, 50*time.Millisecond, "the deadline passes while no coordinator runs")
	h.startCoordinator(nil)
	assert.JSONEq(t, `{"cancelled":"expired","by":"interlock:expiry"}`, string(h.waitFor(run, Finished).Result))
	assert.Len(t, h.waitEvents(run, subjects.EventExpired, 1), 1)
}

func TestTimerSurvivesNATSRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := embedded.Config{DataDir: dir, Sync: embedded.SyncAlways}
	h := &harness{t: t, srv: jstest.Server(t, cfg),
		agents: map[string]AgentFunc{"a": gated(func() Request { return Request{Timeout: 2 * time.Second} })}}
	h.admin = h.conn()
	h.client = NewClient(h.admin)
	h.startCoordinator(nil)
	h.startWorker(nil)
	run := h.start("a", nil)
	st := h.suspendedAtPass(run, 0).Pending()[0]
	_ = h.co.Stop(context.Background())
	stopWorker(t, h.w)
	h.admin.Close()
	port := h.srv.Port()
	h.srv.Shutdown()
	// The deadline passes while everything is down; it fires at start-up.
	require.Eventually(t, func() bool { return time.Now().After(st.ExpiresAt.Add(time.Second)) }, 10*time.Second, 50*time.Millisecond)
	cfg.Port = port
	srv, err := embedded.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	h.srv = srv
	h.admin = h.conn()
	h.client = NewClient(h.admin)
	h.startCoordinator(nil)
	h.startWorker(nil)
	assert.JSONEq(t, `{"cancelled":"expired","by":"interlock:expiry"}`, string(h.waitFor(run, Finished).Result))
}

func TestThreeCoordinatorsFireOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]AgentFunc{"a": gated(func() Request { return Request{Timeout: time.Second} })})
	h.startCoordinator(nil)
	h.startCoordinator(nil)
	var runs []string
	for range 5 {
		runs = append(runs, h.start("a", nil))
	}
	for _, run := range runs {
		rec := h.waitFor(run, Finished)
		assert.JSONEq(t, `{"cancelled":"expired","by":"interlock:expiry"}`, string(rec.Result))
	}
	h.timersIdle()
	for _, run := range runs {
		assert.Len(t, h.events(run, subjects.EventExpired), 1, run)
		assert.Len(t, h.events(run, subjects.EventDecisionAccepted), 1, run)
		assert.Len(t, h.replays(run), 1, run)
	}
}

func TestCoordinatorCrashWhileExpiring(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, map[string]AgentFunc{"a": gated(func() Request { return Request{Timeout: time.Second} })})
	h.startWorker(nil)
	hook, crashed := fault.Once("timer-after-record")
	h.startCoordinator(hook)
	run := h.start("a", nil)
	<-crashed
	h.startCoordinator(nil)
	assert.JSONEq(t, `{"cancelled":"expired","by":"interlock:expiry"}`, string(h.waitFor(run, Finished).Result))
	h.timersIdle()
	assert.Len(t, h.events(run, subjects.EventExpired), 1)
	assert.Len(t, h.replays(run), 1)
}

// The expiry's expired event is stored with its decision: a coordinator
// that stops right after that decision's commit (the replay queued) has
// already written it, so no replay of an expiry ever completes in a trail
// that does not say the interrupt expired.
func TestExpiredStoredWithTheExpirysDecision(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, map[string]AgentFunc{"a": gated(func() Request { return Request{Timeout: time.Second} })})
	h.startWorker(nil)
	hook, crashed := fault.Once("decision-after-work")
	h.startCoordinator(hook)
	run := h.start("a", nil)
	<-crashed
	types := func() []subjects.EventType {
		evs, err := h.client.Events(h.ctx(), run)
		require.NoError(t, err)
		var out []subjects.EventType
		for _, e := range evs {
			out = append(out, e.Type)
		}
		return out
	}
	assert.Equal(t, []subjects.EventType{subjects.EventSuspended, subjects.EventDecisionAccepted, subjects.EventExpired}, types(),
		"the trail when the coordinator stopped after the expiry's decision")
	h.startCoordinator(nil)
	assert.JSONEq(t, `{"cancelled":"expired","by":"interlock:expiry"}`, string(h.waitFor(run, Finished).Result))
	h.timersIdle()
	// The expiry's decision, delivered again to the new coordinator, finds
	// its first entry stored: the record's copy then goes in a recorded
	// entry of its own (every coordinator seals copies since the tenth
	// session), which may come before or after the completion.
	trail := slices.DeleteFunc(h.trailTypes(run), func(t subjects.EventType) bool { return t == subjects.EventRecorded })
	assert.Equal(t, []subjects.EventType{subjects.EventSuspended, subjects.EventDecisionAccepted, subjects.EventExpired,
		subjects.EventCompleted}, trail)
	assert.Len(t, h.replays(run), 1)
}

// A reminder already past when its timer is armed is skipped: the first is
// due 8 s after the body asked, time enough for a loaded machine to store
// the suspension and arm it (at 2 s, a late arming would skip it and the
// test would wait for a second reminder that never comes).
func TestReminderNotices(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]AgentFunc{"a": gated(func() Request {
		return Request{Timeout: 10 * time.Second, RemindBefore: []time.Duration{2 * time.Second, time.Second}}
	})})
	run := h.start("a", nil)
	h.waitEvents(run, subjects.EventReminded, 2)
	// Each reminder's event is stored before its notice (it may carry the
	// record's copy): wait for the second notice.
	subject, _ := h.admin.Namespace().Notice(subjects.KindReminder, "a", run)
	var msgs []jetstream.StoredMsg
	require.Eventually(t, func() bool {
		var err error
		msgs, err = h.admin.Messages(h.ctx(), jetstream.StreamRuns, subject, 0, 10)
		return err == nil && len(msgs) >= 2
	}, waitLimit, 20*time.Millisecond, "two reminder notices")
	require.Len(t, msgs, 2)
	for i, m := range msgs {
		require.NoError(t, wireschema.Validate("notice", m.Data))
		n, err := subjects.DecodeNotice(m.Data)
		require.NoError(t, err)
		assert.Equal(t, i+1, n.Seq, fmt.Sprint(i))
		assert.Equal(t, subjects.KindReminder, n.Kind)
	}
	h.waitFor(run, Finished)
	expired, _ := h.admin.Namespace().Notice(subjects.KindExpired, "a", run)
	msgs, err := h.admin.Messages(h.ctx(), jetstream.StreamRuns, expired, 0, 10)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.NoError(t, wireschema.Validate("notice", msgs[0].Data))
	n, err := subjects.DecodeNotice(msgs[0].Data)
	require.NoError(t, err)
	assert.Equal(t, subjects.StatusCancelled, n.Status, "an expiry says what it applied")
}

func TestTimerMessagesMatchSchema(t *testing.T) {
	t.Parallel()
	deadline := time.Now().UTC()
	tm := subjects.Timer{Version: 1, Name: rules.TimerName(subjects.TimerRemind, time.Minute, "int-1", deadline), RunID: "r1",
		InterruptID: "int-1", Kind: subjects.TimerRemind, Deadline: deadline, At: deadline.Add(-time.Minute)}
	data, err := json.Marshal(tm)
	require.NoError(t, err)
	require.NoError(t, wireschema.Validate("timer", data))
	_, err = subjects.DecodeTimer(data)
	require.NoError(t, err)
}

// The NATS server restarted with file storage: every suspended run is still
// there and decidable.
func TestSuspendedRunsSurviveNATSRestart(t *testing.T) {
	t.Parallel()
	cfg := embedded.Config{DataDir: t.TempDir(), Sync: embedded.SyncAlways}
	var calls counter
	h := &harness{t: t, srv: jstest.Server(t, cfg), agents: map[string]AgentFunc{"refunds": approvalAgent(&calls)}}
	h.admin = h.conn()
	h.client = NewClient(h.admin)
	co, w := h.startCoordinator(nil), h.startWorker(nil)
	var runs []string
	for range 20 {
		runs = append(runs, h.start("refunds", nil))
	}
	for _, r := range runs {
		h.suspendedAtPass(r, 0)
	}
	_ = co.Stop(context.Background())
	stopWorker(t, w)
	h.admin.Close()
	h.srv = jstest.Restart(t, h.srv, cfg)
	h.admin = h.conn()
	h.client = NewClient(h.admin)
	h.startCoordinator(nil)
	h.startWorker(nil)
	h.approveAll(runs)
	assert.Equal(t, 20, calls.get("step"), "no journaled step ran twice")
}

// TestCancelReasonFromWhoCancelled is issue 23's finding 10: bob cancelled
// with metadata {"reason":"expired"} and the replay was told the interrupt
// expired. The reason comes from who cancelled (the coordinator's expiry,
// subjects.ExpiryApprover, or an approver), never from the metadata an
// approver writes.
func TestCancelReasonFromWhoCancelled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]AgentFunc{"a": gated(func() Request { return Request{Message: "ship it?"} })})
	run := h.start("a", nil)
	rec := h.suspendedAtPass(run, 0)
	v, err := h.client.Decide(h.ctx(), DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID,
		Status: subjects.StatusCancelled, Approver: "bob", Metadata: map[string]any{"reason": "expired"}})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome, "verdict %+v", v)
	rec = h.waitFor(run, Finished)
	assert.JSONEq(t, `{"cancelled":"denied","by":"bob"}`, string(rec.Result), "an approver's cancel is a denial, whatever its metadata says")
}
