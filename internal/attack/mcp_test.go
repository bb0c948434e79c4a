package attack_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/mcpgate"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/mcpbridge"
	"github.com/interlockhq/interlock/subjects"
)

// memClient connects the Go SDK's MCP client to srv in memory.
func memClient(t *testing.T, ctx context.Context, srv *mcp.Server) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "attack", Version: "1"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// mcpWorker runs agent's body as user, on the consumer admin provisioned.
func mcpWorker(t *testing.T, d *deployment, user, agent string, fn processor.AgentFunc) {
	t.Helper()
	prov := processor.NewWorker(d.provisioner(), processor.WorkerConfig{})
	require.NoError(t, prov.Register(agent, nil))
	require.NoError(t, prov.Provision(d.ctx))
	require.NoError(t, mcpbridge.Provision(d.ctx, d.provisioner()))
	w := processor.NewWorker(d.client(user), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register(agent, fn))
	require.NoError(t, w.Start(d.ctx))
	t.Cleanup(func() { _ = w.StopAndCancel(context.Background()) })
}

// TestShippedPermissionsRunMCP: `interlock mcp serve` as user mcp and
// `interlock mcp proxy` as user mcp_proxy work with exactly the shipped
// permissions: an approval requested, decided by ada, read back; a gated
// call approved and made upstream.
func TestShippedPermissionsRunMCP(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	ada := processor.NewClient(d.client("ada"))

	// serve, as mcp.
	mcpWorker(t, d, "mcp", mcpbridge.ServeAgent, mcpbridge.ApprovalAgent())
	s := mcpbridge.NewServe(d.client("mcp"), mcpbridge.Config{Poll: 100 * time.Millisecond})
	t.Cleanup(s.Close)
	cs := memClient(t, d.ctx, s.Server())
	res, err := cs.CallTool(d.ctx, &mcp.CallToolParams{Name: "request_approval", Arguments: map[string]any{"action": "ship", "approvers": []string{"ada"}}})
	require.NoError(t, err)
	var st mcpbridge.Status
	require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &st))
	require.Equal(t, mcpbridge.StatusPending, st.Status)
	_, err = ada.Decide(d.ctx, processor.DecisionRequest{RunID: st.RunID, InterruptID: st.InterruptID, Status: subjects.StatusResolved, Approver: "ada"})
	require.NoError(t, err)
	res, err = cs.CallTool(d.ctx, &mcp.CallToolParams{Name: "wait_approval", Arguments: map[string]any{"id": st.RunID}})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &st))
	assert.Equal(t, mcpbridge.StatusApproved, st.Status)

	// proxy, as mcp_proxy, in front of an upstream with one tool.
	called := make(chan string, 1)
	up := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	mcp.AddTool(up, &mcp.Tool{Name: "launch"}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		Target string `json:"target"`
	}) (*mcp.CallToolResult, any, error) {
		called <- in.Target
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	})
	upc := memClient(t, d.ctx, up)
	gate, err := mcpgate.Parse("tool:launch")
	require.NoError(t, err)
	p, err := mcpbridge.NewProxy(d.ctx, d.client("mcp_proxy"), upc, mcpbridge.ProxyConfig{
		Config: mcpbridge.Config{Poll: 100 * time.Millisecond}, Gate: gate, Approvers: []string{"ada"}})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	mcpWorker(t, d, "mcp_proxy", mcpbridge.ProxyAgent, p.Agent())
	pc := memClient(t, d.ctx, p.Server())
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := pc.CallTool(d.ctx, &mcp.CallToolParams{Name: "launch", Arguments: map[string]any{"target": "moon"}})
		done <- res
	}()
	auditor := processor.NewClient(d.client("auditor"))
	var pending []subjects.PendingInterrupt
	require.Eventually(t, func() bool {
		pending, err = auditor.Pending(d.ctx)
		return err == nil && len(pending) == 1
	}, 30*time.Second, 20*time.Millisecond)
	_, err = ada.Decide(d.ctx, processor.DecisionRequest{RunID: pending[0].RunID, InterruptID: pending[0].ID,
		Status: subjects.StatusResolved, Approver: "ada", Payload: map[string]any{}})
	require.NoError(t, err)
	assert.Equal(t, "moon", <-called)
	r := <-done
	require.NotNil(t, r)
	assert.False(t, r.IsError)
}

// TestAttackMCPUserOverreach: what a holder of the mcp or mcp_proxy
// credentials still cannot do: read a run record (answers), decide, start
// another agent's run, report another agent's pass, or (mcp) write the
// proxy's calls bucket, (mcp_proxy) start a serve run.
func TestAttackMCPUserOverreach(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")
	for _, user := range []string{"mcp", "mcp_proxy"} {
		a := d.attacker(user)
		_, err := a.nc.Request("$JS.API.DIRECT.GET.KV_interlock_runs.$KV.interlock_runs.run-1", nil, 2*time.Second)
		require.Error(t, err)
		a.refused(t, "$JS.API.DIRECT.GET.KV_interlock_runs")
		for _, subject := range []string{"interlock.resume.run-1.ada", "interlock.start.refunds", "interlock.completed.refunds.run-1"} {
			require.NoError(t, a.nc.Publish(subject, []byte(`{}`)))
			a.refused(t, subject)
		}
	}
	a := d.attacker("mcp")
	require.NoError(t, a.nc.Publish("$KV.interlock_mcp_calls.run-1.x", nil))
	a.refused(t, "$KV.interlock_mcp_calls.run-1.x")
	a = d.attacker("mcp_proxy")
	require.NoError(t, a.nc.Publish("interlock.start.mcp", nil))
	a.refused(t, "interlock.start.mcp")
}

// The call record is what makes a gated call at most once: a pass that runs
// again after a crash finds it and reports outcome_unknown rather than call
// the upstream twice. Whoever holds mcp_proxy's credentials may write the
// bucket's subjects, and a delete marker made the record's create succeed
// again (a KV create takes a deleted key), so the next attempt called
// again. A record is created only where its key has never been written.
func TestAttackMCPProxyDeletesCallRecord(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	require.NoError(t, mcpbridge.Provision(d.ctx, d.provisioner()))
	proxy := d.client("mcp_proxy")
	calls, err := proxy.OpenBucket(d.ctx, mcpbridge.CallsBucket)
	require.NoError(t, err)
	key := "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.int-1"
	first, err := calls.Mark(d.ctx, key, []byte(`{}`))
	require.NoError(t, err)
	require.True(t, first, "the proxy records the call")
	first, err = calls.Mark(d.ctx, key, []byte(`{}`))
	require.NoError(t, err)
	require.False(t, first, "a second attempt finds the record")

	a := d.attacker("mcp_proxy")
	m := nats.NewMsg("$KV." + proxy.BucketName(mcpbridge.CallsBucket) + "." + key)
	m.Header.Set("KV-Operation", "DEL")
	_, err = a.js.PublishMsg(m)
	require.Error(t, err, "the bucket takes no second message on a key: the delete marker is refused")
	has, err := calls.Has(d.ctx, key)
	require.NoError(t, err)
	require.True(t, has)

	first, err = calls.Mark(d.ctx, key, []byte(`{}`))
	require.NoError(t, err)
	assert.False(t, first, "after mcp_proxy's delete marker, another attempt still finds the call made")

	// Nor does a rollup erase the records: the bucket allows none.
	other := "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.int-2"
	_, err = calls.Mark(d.ctx, other, []byte(`{}`))
	require.NoError(t, err)
	roll := nats.NewMsg("$KV." + proxy.BucketName(mcpbridge.CallsBucket) + "." + key)
	roll.Header.Set("Nats-Rollup", "all")
	_, err = a.js.PublishMsg(roll)
	require.Error(t, err, "a rollup is refused")
	first, err = calls.Mark(d.ctx, other, []byte(`{}`))
	require.NoError(t, err)
	assert.False(t, first, "the other record stands")
}
