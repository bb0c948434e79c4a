package attack_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// The attacks of this file are those of one agent on another's runs (found
// items 6 and 12): a message id that another publisher can predict and
// write first, and a forged outcome. The victim agent is "refunds", run by
// the agent user; the runs it is attacked through are started by the
// gateway.

// runAgent starts a worker for agent as user, after admin provisioned its
// consumer; body is its body.
func runAgent(t *testing.T, d *deployment, user, agent string, body processor.AgentFunc) {
	t.Helper()
	provisioner := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, provisioner.Register(agent, nil))
	require.NoError(t, provisioner.Provision(d.ctx))
	w := processor.NewWorker(d.client(user), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register(agent, body))
	require.NoError(t, w.Start(d.ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
}

// finished waits, as the auditor and for at most 15 s, until run is
// completed or failed.
func finished(t *testing.T, d *deployment, run string) *subjects.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(d.ctx, 15*time.Second)
	defer cancel()
	rec, err := processor.NewClient(d.client("auditor")).Wait(ctx, run, processor.Finished)
	require.NoError(t, err, "run %s finished", run)
	return rec
}

// publishJSON publishes v as a with message id msgID and requires it stored.
func publishJSON(t *testing.T, a *attacker, subject, msgID string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	_, err = a.js.Publish(subject, data, nats.MsgId(msgID))
	require.NoError(t, err, "publish on %s", subject)
}

// TestAttackStartIDSquatsAnotherStart is found item 12 for starts: the agent
// user starts a run of its own with the message id the victim's start will
// have (<run>:0:work), before the gateway starts the victim run. The
// victim's start must not be dropped as a duplicate.
func TestAttackStartIDSquatsAnotherStart(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	runAgent(t, d, "agent", "refunds", func(context.Context, json.RawMessage) (any, error) { return "done", nil })
	a := d.attacker("agent")
	publishJSON(t, a, "interlock.start.refunds", "victim:0:work",
		subjects.Work{PassRef: subjects.PassRef{Version: 1, RunID: "mine", Agent: "refunds"}})
	finished(t, d, "mine")

	run, err := processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil, processor.WithRunID("victim"))
	require.NoError(t, err)
	rec := finished(t, d, run)
	assert.Equal(t, subjects.RunCompleted, rec.Status)
}

// TestAttackOutcomeIDSquatsAnotherOutcome is found item 12 for outcomes:
// the agent user reports a failure of a run of its own with the message id
// the victim's first outcome will have (<run>:0). The victim's outcome must
// not be dropped as a duplicate.
func TestAttackOutcomeIDSquatsAnotherOutcome(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	a := d.attacker("agent")
	publishJSON(t, a, "interlock.failed.refunds.mine", "victim:0",
		subjects.Failure{PassRef: subjects.PassRef{Version: 1, RunID: "mine", Agent: "refunds"}, Error: "squat",
			FailedAt: time.Now().UTC()})
	finished(t, d, "mine")

	runAgent(t, d, "agent", "refunds", func(context.Context, json.RawMessage) (any, error) { return "done", nil })
	run, err := processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil, processor.WithRunID("victim"))
	require.NoError(t, err)
	rec := finished(t, d, run)
	assert.Equal(t, subjects.RunCompleted, rec.Status)
}

// TestAttackEmitIDSquatsAnotherRunsEvents is found item 12 for AG-UI
// events: the agent user stores an AG-UI event of a run of its own with the
// message id the victim's first event will have (<run>:emit:0). The
// victim's event must be kept.
func TestAttackEmitIDSquatsAnotherRunsEvents(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	ns := subjects.Default()
	mine, err := ns.AGUI("refunds", "mine")
	require.NoError(t, err)
	publishJSON(t, d.attacker("agent"), mine, "victim:emit:0", map[string]any{"type": "RUN_STARTED"})

	runAgent(t, d, "agent", "refunds", func(ctx context.Context, _ json.RawMessage) (any, error) {
		return "done", processor.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "victim"})
	})
	run, err := processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil, processor.WithRunID("victim"))
	require.NoError(t, err)
	assert.Equal(t, subjects.RunCompleted, finished(t, d, run).Status)
	victim, err := ns.AGUI("refunds", run)
	require.NoError(t, err)
	m, err := d.attacker("admin").js.GetLastMsg("INTERLOCK_AGUI", victim)
	require.NoError(t, err, "the victim's event is kept")
	assert.JSONEq(t, `{"type": "CUSTOM", "name": "victim"}`, string(m.Data))
}

// TestAttackForgedOutcomeBlocksReplay is found item 6: while a run waits
// for ada, the agent user publishes a completion of its pass 1. The
// coordinator ignores it as stale; the worker must not take it for the
// replay's outcome once ada approves: the replay runs and the run
// completes.
func TestAttackForgedOutcomeBlocksReplay(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	var replays atomic.Int32
	runAgent(t, d, "agent", "refunds", func(ctx context.Context, _ json.RawMessage) (any, error) {
		if _, err := processor.Interrupt(processor.WithToolCall(ctx, "refund"), processor.Request{Approvers: []string{"ada"}}); err != nil {
			return nil, err
		}
		replays.Add(1)
		return "refunded", nil
	})
	auditor := processor.NewClient(d.client("auditor"))
	run, err := processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil)
	require.NoError(t, err)
	rec, err := auditor.Wait(d.ctx, run, processor.Suspended)
	require.NoError(t, err)

	forged := subjects.Completion{PassRef: subjects.PassRef{Version: 1, RunID: run, Agent: "refunds", Pass: 1},
		Result: json.RawMessage(`"forged"`), CompletedAt: time.Now().UTC()}
	publishJSON(t, d.attacker("agent"), "interlock.completed.refunds."+run, run+":1", forged)
	require.Eventually(t, func() bool {
		for _, ev := range d.events(run) {
			if ev.Code == subjects.CodeStalePass {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the coordinator ignored the forged outcome")

	v, err := processor.NewClient(d.client("ada")).Decide(d.ctx, processor.DecisionRequest{RunID: run,
		InterruptID: rec.Pending()[0].ID, Status: subjects.StatusResolved, Approver: "ada"})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	done := finished(t, d, run)
	assert.Equal(t, subjects.RunCompleted, done.Status)
	assert.JSONEq(t, `"refunded"`, string(done.Result))
	assert.Equal(t, int32(1), replays.Load(), "the replay ran once")
}

// TestAttackAgentReachesAnotherAgent (requirement 3 of issue 23): with the
// billing agent's credentials, reach the refunds agent's runs: take its
// work, publish on its subjects, read its suspensions and AG-UI events (by
// subject, with wildcards, stream-wide), and report a pass of its run on
// billing's own subjects. Each is refused; the run is unchanged.
func TestAttackAgentReachesAnotherAgent(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	provisioner := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, provisioner.Register("refunds", nil))
	require.NoError(t, provisioner.Provision(d.ctx))
	d.suspend(d.client("agent"), "run-1", "ada")
	// A start of refunds waits in its consumer.
	_, err := processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", map[string]any{"iban": "DE00"})
	require.NoError(t, err)

	b := d.attacker("agent_billing")
	// Its own reads work: nothing of billing's is stored.
	_, err = b.nc.Request("$JS.API.DIRECT.GET.INTERLOCK_RUNS.interlock.*.billing.run-1", nil, 2*time.Second)
	require.NoError(t, err, "billing may read its own subjects")

	for _, api := range []string{
		"$JS.API.CONSUMER.MSG.NEXT.INTERLOCK_WORK.worker_refunds",
		"$JS.API.CONSUMER.INFO.INTERLOCK_WORK.worker_refunds",
		"$JS.API.DIRECT.GET.INTERLOCK_RUNS.interlock.suspended.refunds.run-1",
		"$JS.API.DIRECT.GET.INTERLOCK_RUNS.interlock.*.*.run-1",
		"$JS.API.DIRECT.GET.INTERLOCK_RUNS.interlock.>",
		"$JS.API.DIRECT.GET.INTERLOCK_RUNS",
		"$JS.API.STREAM.MSG.GET.INTERLOCK_RUNS",
		"$JS.API.STREAM.INFO.INTERLOCK_RUNS",
		"$JS.API.DIRECT.GET.INTERLOCK_AGUI.interlock.agui.refunds.run-1",
		"$JS.API.DIRECT.GET.INTERLOCK_AGUI",
		"$JS.API.STREAM.INFO.INTERLOCK_AGUI",
	} {
		req := []byte(`{"last_by_subj": "interlock.suspended.refunds.run-1", "batch": 1}`)
		if strings.Contains(api, "MSG.NEXT") {
			req = []byte(`{"batch": 1}`)
		}
		_, err := b.nc.Request(api, req, 500*time.Millisecond)
		require.Error(t, err, api)
		b.refused(t, `Publish to "`+api+`"`)
	}
	ns := subjects.Default()
	for _, subject := range []string{"interlock.start.refunds", "interlock.suspended.refunds.run-1",
		"interlock.completed.refunds.run-1", "interlock.failed.refunds.run-1", "interlock.agui.refunds.run-1"} {
		require.NoError(t, b.nc.Publish(subject, []byte(`{}`)))
		b.refused(t, `Publish to "`+subject+`"`)
	}
	// A completion of refunds's run on billing's own subject: the subject
	// is billing's to publish on, the run is not its to report.
	forged := subjects.Completion{PassRef: subjects.PassRef{Version: 1, RunID: "run-1", Agent: "billing"},
		Result: json.RawMessage(`"forged"`), CompletedAt: time.Now().UTC()}
	own, err := ns.Completed("billing", "run-1")
	require.NoError(t, err)
	publishJSON(t, b, own, "forged", forged)
	require.Eventually(t, func() bool {
		for _, ev := range d.events("run-1") {
			if ev.Code == subjects.CodeWrongAgent {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the coordinator refused billing's report on refunds's run")
	rec, err := processor.NewClient(d.client("auditor")).Run(d.ctx, "run-1")
	require.NoError(t, err)
	assert.Equal(t, subjects.RunSuspended, rec.Status)
	assert.Equal(t, "refunds", rec.Agent)
	info, err := d.attacker("admin").js.ConsumerInfo("INTERLOCK_WORK", "worker_refunds")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), info.NumPending, "refunds's start still waits for refunds")
}
