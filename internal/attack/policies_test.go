package attack_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/policy"
	"github.com/interlockhq/interlock/subjects"
)

// Decision policies (protocol version 2) against the shipped configs: the
// refunds agent, run by the agent user, gates a payment behind two of
// three approvers (ada, bob, carol); the gateway starts the run for its
// session's identity, ada, on interlock.start.refunds.ada.

// payArgs are the arguments of the gated call.
var payArgs = map[string]any{"to": "ACME", "amount": 12400}

// quorumRun starts a run of the refunds agent as requester (through the
// gateway user) whose body asks for policy on a payment, and returns the
// run id and the interrupt once it waits.
func quorumRun(t *testing.T, d *deployment, requester string, policy subjects.Policy) (string, subjects.InterruptState) {
	t.Helper()
	runAgent(t, d, "agent", "refunds", func(ctx context.Context, _ json.RawMessage) (any, error) {
		ctx = processor.WithToolCall(ctx, "call-pay")
		dec, err := processor.Interrupt(ctx, processor.Request{Message: "Pay 12,400 EUR to ACME?",
			Approvers: []string{"ada", "bob", "carol"}, Policy: &policy,
			Call: &processor.ToolCall{Tool: "pay", Arguments: payArgs}})
		if err != nil {
			return nil, err
		}
		key, _ := processor.ExecutionKey(ctx)
		return map[string]any{"approvedBy": len(dec.Votes), "key": key}, nil
	})
	var opts []processor.StartOption
	if requester != "" {
		opts = append(opts, processor.WithRequester(requester))
	}
	run, err := processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", map[string]any{"invoice": "I-1"}, opts...)
	require.NoError(t, err)
	rec, err := processor.NewClient(d.client("auditor")).Wait(d.ctx, run, processor.Suspended)
	require.NoError(t, err)
	require.Equal(t, requester, rec.Requester, "the requester is the start subject's token")
	require.Len(t, rec.Interrupts, 1)
	return run, rec.Interrupts[0]
}

// vote decides as approver and returns the verdict (a rejection is not an
// error here: the verdict says it).
func vote(t *testing.T, d *deployment, approver string, req processor.DecisionRequest) subjects.Verdict {
	t.Helper()
	req.Approver = approver
	if req.Status == "" {
		req.Status = subjects.StatusResolved
	}
	v, err := processor.NewClient(d.client(approver)).Decide(d.ctx, req)
	if v.Outcome != subjects.OutcomeRejected {
		require.NoError(t, err)
	}
	return v
}

// stillWaits requires that run waits on its interrupt, undecided.
func stillWaits(t *testing.T, d *deployment, run string) {
	t.Helper()
	rec, err := processor.NewClient(d.client("auditor")).Run(d.ctx, run)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunSuspended, rec.Status)
	assert.Nil(t, rec.Interrupts[0].Decision)
}

// TestAttackSelfApproval: ada started the run (through the gateway, as her
// session) and approves her own payment.
func TestAttackSelfApproval(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	run, in := quorumRun(t, d, "ada", subjects.Policy{Approvals: 2})
	v := vote(t, d, "ada", processor.DecisionRequest{RunID: run, InterruptID: in.ID})
	assert.Equal(t, subjects.OutcomeRejected, v.Outcome)
	assert.Equal(t, subjects.CodeRequesterExcluded, v.Code)
	stillWaits(t, d, run)
}

// TestAttackDoubleVote: bob votes twice, with two decision ids, to make a
// quorum of two alone.
func TestAttackDoubleVote(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	run, in := quorumRun(t, d, "ada", subjects.Policy{Approvals: 2})
	v := vote(t, d, "bob", processor.DecisionRequest{RunID: run, InterruptID: in.ID, DecisionID: "bob-1"})
	require.Equal(t, subjects.OutcomeVoteRecorded, v.Outcome, v.Detail)
	require.NotNil(t, v.Tally)
	assert.Equal(t, 1, v.Tally.Approvals)
	assert.Equal(t, []string{"carol"}, v.Tally.WaitingOn)
	v = vote(t, d, "bob", processor.DecisionRequest{RunID: run, InterruptID: in.ID, DecisionID: "bob-2"})
	assert.Equal(t, subjects.CodeAlreadyVoted, v.Code)
	stillWaits(t, d, run)
}

// TestAttackStaleArgumentsVote: bob approves with the digest of arguments
// he saw elsewhere (an earlier, smaller payment), hoping his vote counts
// for the call that waits.
func TestAttackStaleArgumentsVote(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	run, in := quorumRun(t, d, "", subjects.Policy{Approvals: 1})
	require.NotNil(t, in.Call)
	stale, err := subjects.CallDigest("pay", json.RawMessage(`{"to":"ACME","amount":124}`))
	require.NoError(t, err)
	v := vote(t, d, "bob", processor.DecisionRequest{RunID: run, InterruptID: in.ID, CallDigest: stale})
	assert.Equal(t, subjects.CodeCallMismatch, v.Code)
	stillWaits(t, d, run)

	// The vote on the call that waits approves it; the replay runs it with
	// its execution key.
	v = vote(t, d, "bob", processor.DecisionRequest{RunID: run, InterruptID: in.ID, CallDigest: in.Call.Digest})
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome, v.Detail)
	rec := finished(t, d, run)
	require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)
	var out struct{ Key string }
	require.NoError(t, json.Unmarshal(rec.Result, &out))
	assert.Len(t, out.Key, 64, "the approved call's execution key reached the body")
}

// smallRefunds is an operator rule that approves refunds under 20.
const smallRefunds = `
  - name: small-refunds
    match: 'tool == "issue_refund" && arguments.amount < 20'
    action: approve`

// withRules is a coordinator's config with the operator rules given (each
// one item of the rules list, in YAML).
func withRules(t *testing.T, rules ...string) coordinator.Config {
	t.Helper()
	set, err := policy.Parse("policies.yaml", []byte("rules:"+strings.Join(rules, "")+"\n"))
	require.NoError(t, err)
	return coordinator.Config{Policies: set}
}

// TestAttackAgentLoosensPolicy: the operator requires two approvals, the
// requester excluded, for payments; the agent asks for one approval and
// lets the requester vote, hoping ada can approve her own payment alone.
func TestAttackAgentLoosensPolicy(t *testing.T) {
	t.Parallel()
	d := newDeploymentWith(t, withRules(t, `
  - name: payments-need-two
    match: 'tool == "pay"'
    action: require
    approvals: 2`))
	run, in := quorumRun(t, d, "ada", subjects.Policy{Approvals: 1, AllowRequester: true, AllowChange: true})
	require.NotNil(t, in.Policy)
	assert.Equal(t, 2, in.Policy.Approvals, "the effective policy is the stricter")
	assert.False(t, in.Policy.AllowRequester)
	assert.Equal(t, []string{"payments-need-two"}, in.Policy.Rules)

	v := vote(t, d, "ada", processor.DecisionRequest{RunID: run, InterruptID: in.ID})
	assert.Equal(t, subjects.CodeRequesterExcluded, v.Code)
	v = vote(t, d, "bob", processor.DecisionRequest{RunID: run, InterruptID: in.ID})
	assert.Equal(t, subjects.OutcomeVoteRecorded, v.Outcome, "one approval does not decide it")
	stillWaits(t, d, run)
}

// TestAttackAgentRaisesDenials: a require rule that names no denials
// keeps the default, one denial refuses; an agent that asks for denials: 3
// may not raise it. With the shipped permissions, bob's denial cancels the
// payment before ada and carol approve it (before the fix it was only
// recorded, and their approvals paid over it).
func TestAttackAgentRaisesDenials(t *testing.T) {
	t.Parallel()
	d := newDeploymentWith(t, withRules(t, `
  - name: payments-need-two
    match: 'tool == "pay"'
    action: require
    approvals: 2`))
	run, in := quorumRun(t, d, "", subjects.Policy{Denials: 3})
	require.NotNil(t, in.Policy)
	assert.Equal(t, 1, in.Policy.NeedDenials(), "a rule that names no denials keeps the default, 1")

	v := vote(t, d, "bob", processor.DecisionRequest{RunID: run, InterruptID: in.ID, Status: subjects.StatusCancelled})
	assert.Equal(t, subjects.OutcomeAccepted, v.Outcome, "one denial decides it: %s", v.Detail)
	v = vote(t, d, "ada", processor.DecisionRequest{RunID: run, InterruptID: in.ID})
	assert.Equal(t, subjects.CodeAlreadyDecided, v.Code, "an approval after the denial: %s", v.Detail)
	rec := finished(t, d, run)
	assert.NotEqual(t, subjects.RunCompleted, rec.Status, "the payment ran over bob's denial")
}

// TestRuleSettlesInOneRoundTrip: with the shipped permissions, a worker
// asks before suspending (WorkerConfig.AskRules); the coordinator's rule
// approves the small refund, audits it, and the pass goes on: the run
// completes in its first pass, with no suspension and no replay. Another
// agent's user may not ask about the refunds agent's runs.
func TestRuleSettlesInOneRoundTrip(t *testing.T) {
	t.Parallel()
	d := newDeploymentWith(t, withRules(t, smallRefunds))
	provisioner := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, provisioner.Register("refunds", nil))
	require.NoError(t, provisioner.Provision(d.ctx))
	// An ask unanswered within AskTimeout suspends instead (the fallback,
	// correct but not what this test is about): under the whole suite
	// with -race on two cores the default 2s was once too short.
	w := processor.NewWorker(d.client("agent"), processor.WorkerConfig{Logger: quiet, AskRules: true, AskTimeout: 30 * time.Second})
	require.NoError(t, w.Register("refunds", func(ctx context.Context, _ json.RawMessage) (any, error) {
		ctx = processor.WithToolCall(ctx, "call-refund")
		dec, err := processor.Interrupt(ctx, processor.Request{Message: "Refund 5?",
			Call: &processor.ToolCall{Tool: "issue_refund", Arguments: map[string]any{"amount": 5}}})
		if err != nil {
			return nil, err
		}
		key, _ := processor.ExecutionKey(ctx)
		return map[string]any{"by": dec.Approver, "rule": dec.Rule, "key": key}, nil
	}))
	require.NoError(t, w.Start(d.ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	run, err := processor.NewClient(d.client("gateway")).Start(d.ctx, "refunds", nil)
	require.NoError(t, err)
	rec := finished(t, d, run)
	require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)
	assert.Equal(t, 0, rec.Pass, "settled without a suspension and a replay")
	var out struct{ By, Rule, Key string }
	require.NoError(t, json.Unmarshal(rec.Result, &out))
	assert.Equal(t, subjects.PolicyApprover, out.By)
	assert.Equal(t, "small-refunds", out.Rule)
	assert.Len(t, out.Key, 64)
	var audited bool
	for _, ev := range d.events(run) {
		audited = audited || ev.Type == subjects.EventDecisionAccepted && ev.Verdict != nil &&
			ev.Verdict.Approver == subjects.PolicyApprover && ev.Verdict.Rule == "small-refunds"
	}
	assert.True(t, audited, "the rule's decision is in the audit trail")

	a := d.attacker("agent_billing")
	_, err = a.nc.Request("interlock.ask.refunds."+run, []byte(`{}`), time.Second)
	require.Error(t, err)
	a.refused(t, "interlock.ask.refunds")
	// Nor may an agent answer asks in the coordinator's place (a forged
	// "decided" for another agent's gate, or its own).
	for _, user := range []string{"agent", "agent_billing", "mcp_proxy", "notifier", "gateway", "ada"} {
		x := d.attacker(user)
		_, err = x.nc.SubscribeSync("interlock.ask.>")
		require.NoError(t, err, user)
		x.refused(t, `Subscription to "interlock.ask.>"`)
	}
}
