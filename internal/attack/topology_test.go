package attack_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

// TestAttackCoordinatorLowersLimits is issue 23 finding 1: with the
// coordinator's credentials (what `serve` runs as), read a stream's
// configuration, set max_msgs to 1 and send STREAM.UPDATE: the audit trail
// and the decisions shrink to one message each, deny_purge and deny_delete
// notwithstanding. The same lowering of the run records' and the pending
// index's buckets erases records. Only admin changes a stream's or a
// bucket's configuration: the coordinator holds no STREAM.UPDATE.
func TestAttackCoordinatorLowersLimits(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.suspend(d.client("agent"), "run-1", "ada")
	d.suspend(d.client("agent"), "run-2", "ada")
	// Two decisions in the decisions stream, for an interrupt that does
	// not exist: refused, they leave both runs pending.
	ada := d.attacker("ada")
	for _, run := range []string{"run-1", "run-2"} {
		data, err := json.Marshal(subjects.Decision{Version: 1, InterruptID: "no-such-interrupt", Status: subjects.StatusResolved})
		require.NoError(t, err)
		_, err = ada.js.Publish("interlock.resume."+run+".ada", data)
		require.NoError(t, err)
	}
	admin := d.attacker("admin")
	streams := []string{"INTERLOCK_EVENTS", "INTERLOCK_DECISIONS", "KV_interlock_runs", "KV_interlock_pending"}
	before := map[string]uint64{}
	for _, stream := range streams {
		require.Eventually(t, func() bool {
			info, err := admin.js.StreamInfo(stream)
			require.NoError(t, err)
			before[stream] = info.State.Msgs
			return info.State.Msgs >= 2
		}, 10*time.Second, 10*time.Millisecond, "%s holds two messages", stream)
	}

	a := d.attacker("coordinator")
	for _, stream := range streams {
		info, err := a.js.StreamInfo(stream)
		require.NoError(t, err, "the coordinator reads %s's configuration", stream)
		lowered := info.Config
		lowered.MaxMsgs = 1
		_, err = a.js.UpdateStream(&lowered)
		require.Error(t, err, "the coordinator may not lower %s's limits", stream)
		a.refused(t, "$JS.API.STREAM.UPDATE."+stream)

		after, err := admin.js.StreamInfo(stream)
		require.NoError(t, err)
		assert.Equal(t, int64(-1), after.Config.MaxMsgs, "%s's limit is unchanged", stream)
		assert.GreaterOrEqual(t, after.State.Msgs, before[stream], "%s lost no message", stream)
	}
}
