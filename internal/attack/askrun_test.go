package attack_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// TestAttackAskAboutUnrecordedRun: the billing agent asks, on its own ask
// subject, about a run id that has no record yet (one the refunds agent's
// run will use, chosen by people: order-1234) and an interrupt id it can
// compute. The coordinator settles it by a rule and records the decision
// in that run's trail, naming billing as the agent. Before, the entry's
// message id named only the run, pass and interrupt, so when the refunds
// agent's real run asked the same, its real rule decision was dropped as a
// duplicate: the trail said a deny rule stopped a refund that ran. The
// message id now names the asking agent too. What is left (security.md,
// Known limits): billing's own entry stays in that run's trail, naming
// billing.
func TestAttackAskAboutUnrecordedRun(t *testing.T) {
	t.Parallel()
	d := newDeploymentWith(t, withRules(t, smallRefunds, `
  - name: huge-refunds-denied
    match: 'tool == "issue_refund" && arguments.amount >= 1000'
    action: deny`))
	provisioner := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, provisioner.Register("refunds", nil))
	require.NoError(t, provisioner.Provision(d.ctx))

	run := "order-1234" // a run id the billing agent can guess
	interrupt := subjects.InterruptID(run, "call-refund", 0)

	// The attack: billing asks on interlock.ask.billing.<run>.
	ask := subjects.Ask{Version: subjects.Version2, RunID: run, Agent: "billing", Pass: 0, Requester: "ada",
		Interrupt: subjects.Interrupt{ID: interrupt, Reason: "x",
			Call: &subjects.Call{Tool: "issue_refund", Arguments: json.RawMessage(`{"amount":5000}`)}}}
	call, err := subjects.NewCall("issue_refund", json.RawMessage(`{"amount":5000}`))
	require.NoError(t, err)
	ask.Interrupt.Call = call
	data, err := json.Marshal(ask)
	require.NoError(t, err)
	a := d.attacker("agent_billing")
	out, err := a.nc.Request("interlock.ask.billing."+run, data, 5*time.Second)
	require.NoError(t, err)
	t.Logf("billing's ask answered: %s", out.Data)

	// Now the refunds agent's genuine run with that id.
	w := processor.NewWorker(d.client("agent"), processor.WorkerConfig{Logger: quiet, AskRules: true})
	require.NoError(t, w.Register("refunds", func(ctx context.Context, _ json.RawMessage) (any, error) {
		ctx = processor.WithToolCall(ctx, "call-refund")
		dec, err := processor.Interrupt(ctx, processor.Request{Message: "Refund 5?",
			Call: &processor.ToolCall{Tool: "issue_refund", Arguments: map[string]any{"amount": 5}}})
		if err != nil {
			return nil, err
		}
		return map[string]any{"by": dec.Approver, "rule": dec.Rule, "status": dec.Status}, nil
	}))
	require.NoError(t, w.Start(d.ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	_, err = processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil, processor.WithRunID(run))
	require.NoError(t, err)
	rec := finished(t, d, run)
	t.Logf("run %s: status %s agent %s result %s", run, rec.Status, rec.Agent, rec.Result)
	for _, ev := range d.events(run) {
		line := string(ev.Type) + " agent=" + ev.Agent
		if ev.Verdict != nil {
			line += " approver=" + ev.Verdict.Approver + " rule=" + ev.Verdict.Rule + " detail=" + ev.Verdict.Detail
		}
		t.Log(line)
	}
	var genuine bool
	for _, ev := range d.events(run) {
		if ev.Type == subjects.EventDecisionAccepted && ev.Verdict != nil {
			switch ev.Verdict.Rule {
			case "small-refunds":
				genuine = true
				assert.Equal(t, "refunds", ev.Agent)
			case "huge-refunds-denied":
				assert.Equal(t, "billing", ev.Agent, "billing's entry names billing")
			}
		}
	}
	assert.True(t, genuine, "the run's real rule decision is in its trail")
	assert.Equal(t, subjects.RunCompleted, rec.Status)
}
