package attack_test

import (
	"testing"

	"github.com/stretchr/testify/require"
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
