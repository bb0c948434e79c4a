package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// TestQuorumFromTheCommandLine: serve --policies requires two approvals
// for payments; `interlock approve` prints what remains after the first
// vote, `interlock show` shows the call, the votes and what is needed, and
// the second approval replays the run.
func TestQuorumFromTheCommandLine(t *testing.T) {
	t.Parallel()
	policies := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(policies, []byte(`
rules:
  - name: payments-need-two
    match: 'tool == "pay"'
    action: require
    approvals: 2
`), 0o600))
	srv := serve(t, t.TempDir(), "--policies", policies)
	url, stop := srv.URL, srv.Stop
	ctx := context.Background()
	require.Equal(t, 0, cli(t, "provision", "--nats-url", url, "--agent", "pay").code)
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()
	w := processor.NewWorker(conn, processor.WorkerConfig{})
	require.NoError(t, w.Register("pay", func(ctx context.Context, _ json.RawMessage) (any, error) {
		ctx = processor.WithToolCall(ctx, "call-1")
		d, err := processor.Interrupt(ctx, processor.Request{Message: "Pay 12,400 EUR?", Approvers: []string{"ada", "bob", "cy"},
			Call: &processor.ToolCall{Tool: "pay", Arguments: map[string]any{"to": "ACME", "amount": 12400}}})
		if err != nil {
			return nil, err
		}
		return len(d.Votes), nil
	}))
	require.NoError(t, w.Start(ctx))
	defer func() { _ = w.Stop(context.Background()) }()
	api := processor.NewClient(conn)
	run, err := api.Start(ctx, "pay", nil)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err = api.Wait(wctx, run, processor.Suspended)
	require.NoError(t, err)

	r := cli(t, "approve", run, "--approver", "ada", "--nats-url", url)
	require.Equal(t, 0, r.code, r.out+r.err)
	assert.Contains(t, r.out, "vote recorded")
	assert.Contains(t, r.out, "1 of 2 approvals")
	assert.Contains(t, r.out, "waiting on [bob cy]")

	r = cli(t, "show", run, "--nats-url", url)
	require.Equal(t, 0, r.code, r.out+r.err)
	assert.Contains(t, r.out, `call     pay {"amount":12400,"to":"ACME"}`)
	assert.Contains(t, r.out, "rules    payments-need-two")
	assert.Contains(t, r.out, "needs    1 of 2 approvals")
	assert.Contains(t, r.out, "ada  resolved")

	r = cli(t, "approve", run, "--approver", "ada", "--nats-url", url)
	assert.Equal(t, exitRejected, r.code, r.out+r.err)
	assert.Contains(t, r.out, "already_voted")

	r = cli(t, "approve", run, "--approver", "bob", "--nats-url", url)
	require.Equal(t, 0, r.code, r.out+r.err)
	assert.Contains(t, r.out, "the run replays now")
	rec, err := api.Wait(wctx, run, processor.Finished)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunCompleted, rec.Status)
	assert.JSONEq(t, `2`, string(rec.Result), "the replay receives every vote")
	require.NoError(t, w.Stop(context.Background()))
	assert.Equal(t, 0, stop())
}

// TestWithdrawFromTheCommandLine: `interlock withdraw` takes back an open
// vote where the interrupt's policy allows changes, printing what remains
// (and --json prints the verdict); withdrawing without an open vote is
// refused (no_vote, exit 3); where the policy does not allow changes, the
// withdrawal is refused and the vote stands.
func TestWithdrawFromTheCommandLine(t *testing.T) {
	t.Parallel()
	srv := serve(t, t.TempDir())
	url, stop := srv.URL, srv.Stop
	ctx := context.Background()
	require.Equal(t, 0, cli(t, "provision", "--nats-url", url, "--agent", "pay").code)
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()
	w := processor.NewWorker(conn, processor.WorkerConfig{})
	require.NoError(t, w.Register("pay", func(ctx context.Context, in json.RawMessage) (any, error) {
		var change bool
		_ = json.Unmarshal(in, &change)
		ctx = processor.WithToolCall(ctx, "call-1")
		d, err := processor.Interrupt(ctx, processor.Request{Message: "Pay?", Approvers: []string{"ada", "bob", "cy"},
			Policy: &subjects.Policy{Approvals: 2, AllowChange: change},
			Call:   &processor.ToolCall{Tool: "pay", Arguments: map[string]any{"amount": 1}}})
		if err != nil {
			return nil, err
		}
		return len(d.Votes), nil
	}))
	require.NoError(t, w.Start(ctx))
	defer func() { _ = w.Stop(context.Background()) }()
	api := processor.NewClient(conn)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()

	run, err := api.Start(wctx, "pay", true)
	require.NoError(t, err)
	_, err = api.Wait(wctx, run, processor.Suspended)
	require.NoError(t, err)
	r := cli(t, "approve", run, "--approver", "ada", "--nats-url", url)
	require.Equal(t, 0, r.code, r.out+r.err)

	r = cli(t, "withdraw", run, "--approver", "ada", "--nats-url", url)
	require.Equal(t, 0, r.code, r.out+r.err)
	assert.Contains(t, r.out, "vote withdrawn")
	assert.Contains(t, r.out, "0 of 2 approvals")

	r = cli(t, "withdraw", run, "--approver", "ada", "--json", "--nats-url", url)
	assert.Equal(t, exitRejected, r.code, r.out+r.err)
	var v subjects.Verdict
	require.NoError(t, json.Unmarshal([]byte(r.out), &v), r.out)
	assert.Equal(t, subjects.CodeNoVote, v.Code)

	// Without allowChange the vote stands.
	fixed, err := api.Start(wctx, "pay", false)
	require.NoError(t, err)
	_, err = api.Wait(wctx, fixed, processor.Suspended)
	require.NoError(t, err)
	r = cli(t, "approve", fixed, "--approver", "ada", "--nats-url", url)
	require.Equal(t, 0, r.code, r.out+r.err)
	r = cli(t, "withdraw", fixed, "--approver", "ada", "--nats-url", url)
	assert.Equal(t, exitRejected, r.code, r.out+r.err)
	assert.Contains(t, r.out, "rejected (")

	// The first run still needs two approvals: the withdrawn vote does not count.
	require.Equal(t, 0, cli(t, "approve", run, "--approver", "bob", "--nats-url", url).code)
	r = cli(t, "approve", run, "--approver", "cy", "--nats-url", url)
	require.Equal(t, 0, r.code, r.out+r.err)
	assert.Contains(t, r.out, "the run replays now")
	rec, err := api.Wait(wctx, run, processor.Finished)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunCompleted, rec.Status)
	require.NoError(t, w.Stop(context.Background()))
	assert.Equal(t, 0, stop())
}
