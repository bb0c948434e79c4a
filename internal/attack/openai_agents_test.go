package attack_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
)

// TestAttackAgentReachesAnotherAgentsRunStates (issue 27): the TypeScript
// OpenAI Agents adapter keeps a run's RunState (the conversation, tool
// arguments) in the bucket interlock_openai_agents, which `interlock
// provision` creates, under <agent>.<run>.<stop>. With the billing agent's
// credentials, read or overwrite the refunds agent's state: by key, with a
// direct get without the key, a stream get, stream info (which lists the
// keys). Each is refused and the state is unchanged; each agent uses its
// own keys.
func TestAttackAgentReachesAnotherAgentsRunStates(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	admin := d.provisioner()
	_, err := admin.Bucket(d.ctx, jetstream.OpenAIAgentsBucket, "Interlock OpenAI Agents adapter: run states waiting on approvals", 0)
	require.NoError(t, err)

	const bucket = "interlock_openai_agents"
	const key = "$KV." + bucket + ".refunds.run-1.0"
	// The refunds agent puts and reads its own state.
	r := d.attacker("agent")
	_, err = r.js.Publish(key, []byte(`{"state":"refunds"}`))
	require.NoError(t, err, "refunds stores its own state")
	got, err := r.nc.Request("$JS.API.DIRECT.GET.KV_"+bucket+"."+key, nil, 2*time.Second)
	require.NoError(t, err)
	assert.JSONEq(t, `{"state":"refunds"}`, string(got.Data), "refunds reads its own state")

	b := d.attacker("agent_billing")
	// Its own keys work.
	_, err = b.js.Publish("$KV."+bucket+".billing.run-2.0", []byte(`{}`))
	require.NoError(t, err, "billing stores its own state")
	for _, api := range []string{
		"$JS.API.DIRECT.GET.KV_" + bucket + "." + key,
		"$JS.API.DIRECT.GET.KV_" + bucket + ".$KV." + bucket + ".>",
		"$JS.API.DIRECT.GET.KV_" + bucket,
		"$JS.API.STREAM.MSG.GET.KV_" + bucket,
		"$JS.API.STREAM.INFO.KV_" + bucket,
	} {
		_, err := b.nc.Request(api, []byte(`{"last_by_subj":"`+key+`"}`), 500*time.Millisecond)
		require.Error(t, err, api)
		b.refused(t, `Publish to "`+api+`"`)
	}
	require.NoError(t, b.nc.Publish(key, []byte(`{"state":"forged"}`)))
	b.refused(t, `Publish to "`+key+`"`)

	msg, err := d.attacker("admin").js.GetLastMsg("KV_"+bucket, key)
	require.NoError(t, err)
	assert.JSONEq(t, `{"state":"refunds"}`, string(msg.Data), "refunds's state is unchanged")
}
