package attack_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/store"
)

// TestAttackPendingIndexMarker: the pending index's marker (key _.index)
// decides whether a coordinator builds the index from the records (issue
// 25: the index lives in memory and a restart loses it). A role that could
// write it could mark a lost index built, or hold a build with a claim,
// and leave whatever waits unlisted. No role but the coordinator (and
// admin) may write into the index at all.
func TestAttackPendingIndexMarker(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	const marker = "$KV.interlock_pending._.index"
	for _, user := range []string{"agent", "agent_billing", "mcp", "mcp_proxy", "notifier", "gateway", "auditor", "ada", "bob"} {
		a := d.attacker(user)
		require.NoError(t, a.nc.Publish(marker, []byte(`{"state":"built","by":"`+user+`"}`)), user)
		a.refused(t, marker)
	}
}

// TestPendingIndexBuiltAsShipped: with the shipped permissions the
// coordinator builds the pending index from the records (its batched read
// of the runs bucket is the bare $JS.API.DIRECT.GET.KV_interlock_runs
// subject, which "KV_interlock_runs.>" does not cover): runs parked before
// the index was lost are listed again.
func TestPendingIndexBuiltAsShipped(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	st := store.NewJetStream(d.client("admin"))
	built := func() bool {
		m, _, err := st.IndexMarker(d.ctx)
		return err == nil && m.State == store.IndexBuilt
	}
	require.Eventually(t, built, 30*time.Second, 20*time.Millisecond, "the index built at the coordinator's start")

	// A run parked, then the index lost (emptied, as a restart of every
	// server of a cluster empties a memory-backed index): listed again.
	d.suspend(d.client("agent"), "run-1", "ada")
	auditor := processor.NewClient(d.client("auditor"))
	listed := func() bool {
		p, err := auditor.Pending(d.ctx)
		return err == nil && len(p) == 1 && p[0].RunID == "run-1"
	}
	require.Eventually(t, listed, 30*time.Second, 20*time.Millisecond)
	a := d.attacker("admin")
	err := a.js.PurgeStream("KV_interlock_pending")
	require.NoError(t, err)
	require.False(t, listed(), "emptied")
	require.Eventually(t, listed, 30*time.Second, 20*time.Millisecond, "built again from the records")
}

// TestAttackIndexLeaderStepDown: a new leader of a replicated pending
// index in memory makes every coordinator build the index again, a read of
// every run record. A role that could have the stream elect one at will
// could keep the coordinators reading for ever; no role but admin may ask
// for it, the coordinator included.
func TestAttackIndexLeaderStepDown(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	const stepDown = "$JS.API.STREAM.LEADER.STEPDOWN.KV_interlock_pending"
	for _, user := range []string{"coordinator", "agent", "agent_billing", "mcp", "mcp_proxy", "notifier", "gateway", "auditor", "ada", "bob"} {
		a := d.attacker(user)
		require.NoError(t, a.nc.Publish(stepDown, nil), user)
		a.refused(t, stepDown)
	}
}
