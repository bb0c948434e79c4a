package processor

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/subjects"
)

// newSizedHarness is a bare harness whose server takes messages of at most
// maxPayload bytes.
func newSizedHarness(t *testing.T, agents map[string]AgentFunc, maxPayload int32) *harness {
	t.Helper()
	return newHarnessOn(t, agents, sized(embedded.Config{DataDir: t.TempDir()}, maxPayload))
}

// sized is cfg with a server max payload of maxPayload bytes.
func sized(cfg embedded.Config, maxPayload int32) embedded.Config {
	cfg.Adjust = func(o *server.Options) { o.MaxPayload = maxPayload }
	return cfg
}

// newHarnessOn is a bare harness on a server started with cfg.
func newHarnessOn(t *testing.T, agents map[string]AgentFunc, cfg embedded.Config) *harness {
	t.Helper()
	h := &harness{t: t, agents: agents, srv: jstest.Server(t, cfg)}
	h.admin = jstest.Client(t, h.srv)
	h.client = NewClient(h.admin)
	return h
}

// suspensionOf is a pass-0 suspension of run by agent "agent" with one
// interrupt carrying metaBytes bytes of metadata.
func suspensionOf(t *testing.T, run string, metaBytes int) []byte {
	t.Helper()
	s := subjects.Suspension{PassRef: subjects.PassRef{Version: subjects.Version, RunID: run, Agent: "agent"},
		Interrupts: []subjects.Interrupt{{ID: "big", Reason: subjects.ReasonConfirmation, Message: "pay?",
			Metadata: mustJSON(t, map[string]string{"blob": strings.Repeat("x", metaBytes)})}},
		SuspendedAt: time.Now().UTC()}
	return mustJSON(t, s)
}

// An agent that does not use the SDK suspends with a record that the
// largest decision allowed would push over the server's max payload: the
// coordinator refuses it with its own code, audits it, and fails the run
// instead of recording a question nobody could answer.
func TestOversizedSuspensionRefusedByCoordinator(t *testing.T) {
	t.Parallel()
	h := newSizedHarness(t, nil, 256<<10)
	h.startCoordinator(nil)
	subject, _ := h.admin.Namespace().Suspended("agent", "run-big")
	_, err := h.admin.Publish(h.ctx(), subject, suspensionOf(t, "run-big", 200<<10), "run-big:0:test", nil)
	require.NoError(t, err, "the suspension itself fits the server")
	rec := h.waitFor("run-big", func(r *subjects.Run) bool { return r.Status != subjects.RunResuming })
	require.Equal(t, subjects.RunFailed, rec.Status, "the run must fail, not wait on a question no answer can be recorded for")
	assert.Contains(t, rec.Error, "record")
	assert.Empty(t, rec.Interrupts, "nothing of the refused suspension is recorded")
	evs := h.waitEvents("run-big", subjects.EventInputRejected, 1)
	assert.Equal(t, subjects.CodeRecordTooLarge, evs[0].Code)
	assert.Contains(t, evs[0].Detail, "max payload")
	h.waitEvents("run-big", subjects.EventFailed, 1)
}

// The Go SDK refuses such a suspension before publishing it: the pass ends
// with ErrSuspensionTooLarge and the run fails with that reason.
func TestWorkerRefusesOversizedSuspension(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("y", 200<<10)
	h := newSizedHarness(t, map[string]AgentFunc{"agent": func(ctx context.Context, _ json.RawMessage) (any, error) {
		_, err := Interrupt(ctx, Request{Message: "pay?", Metadata: map[string]any{"blob": big}})
		return nil, err
	}}, 256<<10)
	h.startCoordinator(nil)
	h.startWorker(nil)
	run := h.start("agent", map[string]int{"n": 1})
	rec := h.waitFor(run, func(r *subjects.Run) bool { return r.Status != subjects.RunResuming })
	require.Equal(t, subjects.RunFailed, rec.Status)
	assert.Contains(t, rec.Error, ErrSuspensionTooLarge.Error())
	assert.Contains(t, rec.Error, "max payload")
	filter, _ := h.admin.Namespace().RunSuspensions(run)
	_, err := h.admin.LastMsg(h.ctx(), jetstream.StreamRuns, filter)
	assert.ErrorIs(t, err, jetstream.ErrNotFound, "no suspension was published")
}

// A record write that still fails for size (here: the operator lowered
// max_payload after the suspension was recorded) ends in a verdict the
// approver sees and an event, not in a decision retried forever.
func TestDecisionTooLargeForRecordGetsVerdict(t *testing.T) {
	t.Parallel()
	cfg := embedded.Config{DataDir: t.TempDir()}
	h := newHarnessOn(t, nil, cfg)
	h.startCoordinator(nil)
	subject, _ := h.admin.Namespace().Suspended("agent", "run-grow")
	_, err := h.admin.Publish(h.ctx(), subject, suspensionOf(t, "run-grow", 300<<10), "run-grow:0:test", nil)
	require.NoError(t, err)
	h.waitFor("run-grow", func(r *subjects.Run) bool { return r.Status == subjects.RunSuspended })
	h.srv = jstest.Restart(t, h.srv, sized(cfg, 340<<10))
	require.Eventually(t, func() bool { // the clients reconnect to the restarted server
		_, err := h.client.Run(h.ctx(), "run-grow")
		return err == nil
	}, waitLimit, 50*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := h.client.Decide(ctx, DecisionRequest{RunID: "run-grow", InterruptID: "big", Status: subjects.StatusResolved,
		Comment: strings.Repeat("c", 60<<10)})
	require.ErrorIs(t, err, ErrRejected, "a verdict, not a timeout: %v", err)
	assert.Equal(t, subjects.CodeRecordTooLarge, v.Code)
	evs := h.waitEvents("run-grow", subjects.EventDecisionRejected, 1)
	assert.Equal(t, subjects.CodeRecordTooLarge, evs[0].Code)
	rec, err := h.client.Run(h.ctx(), "run-grow")
	require.NoError(t, err)
	assert.Equal(t, subjects.RunSuspended, rec.Status, "the refused decision changed nothing")
	assert.Nil(t, rec.Interrupts[0].Decision)
}

// An expiry whose decision the record cannot take (an onExpiry resolve
// payload, on a server whose max payload was lowered after the suspension
// was admitted) is audited and dropped, not retried for ever.
func TestExpiryTooLargeForRecordIsAudited(t *testing.T) {
	t.Parallel()
	cfg := embedded.Config{DataDir: t.TempDir()}
	h := newHarnessOn(t, nil, cfg)
	h.startCoordinator(nil)
	deadline := time.Now().Add(3 * time.Second).UTC()
	s := subjects.Suspension{PassRef: subjects.PassRef{Version: subjects.Version, RunID: "run-expiry", Agent: "agent"},
		Interrupts: []subjects.Interrupt{{ID: "late", Reason: subjects.ReasonConfirmation, ExpiresAt: &deadline,
			OnExpiry: &subjects.ExpiryPolicy{Action: subjects.ExpiryResolve, Payload: mustJSON(t, strings.Repeat("p", 300<<10))}}},
		SuspendedAt: time.Now().UTC()}
	subject, _ := h.admin.Namespace().Suspended("agent", "run-expiry")
	_, err := h.admin.Publish(h.ctx(), subject, mustJSON(t, s), s.RunID+":0:test", nil)
	require.NoError(t, err)
	h.waitFor("run-expiry", func(r *subjects.Run) bool { return r.Status == subjects.RunSuspended })
	h.srv = jstest.Restart(t, h.srv, sized(cfg, 400<<10))
	evs := h.waitEvents("run-expiry", subjects.EventInputRejected, 1)
	assert.Equal(t, subjects.CodeRecordTooLarge, evs[0].Code)
	assert.Equal(t, []string{"late"}, evs[0].InterruptIDs)
	rec, err := h.client.Run(h.ctx(), "run-expiry")
	require.NoError(t, err)
	assert.Nil(t, rec.Interrupts[0].Decision, "nothing changed")
}

// A result nested deeper than every reader takes was published, refused by
// the coordinator (malformed), and the run never finished; the worker now
// fails the run with the reason.
func TestWorkerRefusesTooDeepResult(t *testing.T) {
	t.Parallel()
	var deep any = 1
	for range subjects.MaxDepth + 5 {
		deep = []any{deep}
	}
	h := newHarness(t, map[string]AgentFunc{"agent": func(context.Context, json.RawMessage) (any, error) { return deep, nil }})
	h.startCoordinator(nil)
	h.startWorker(nil)
	run := h.start("agent", map[string]int{"n": 1})
	rec := h.waitFor(run, func(r *subjects.Run) bool { return r.Status == subjects.RunFailed || r.Status == subjects.RunCompleted })
	require.Equal(t, subjects.RunFailed, rec.Status)
	assert.Contains(t, rec.Error, "deeper than the protocol's 128 levels")
}
