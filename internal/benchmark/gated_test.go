package benchmark

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/jetstream/embedded"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGatedScenario runs the gated scenario a few times (a check that it
// works, not a measurement): both figures are there, for the gated and the
// ungated run.
func TestGatedScenario(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := RunSide(ctx, "interlock", embedded.SyncInterval, Options{Scenarios: []string{"gated"}, Runs: 3})
	require.NoError(t, err)
	require.Len(t, res, 2)
	byName := map[string]Result{}
	for _, r := range res {
		byName[r.Scenario] = r
	}
	for _, name := range []string{"gated", "ungated"} {
		r, ok := byName[name]
		require.True(t, ok, name)
		assert.Equal(t, 3, r.Runs)
		assert.Positive(t, r.P50ms, name)
		assert.GreaterOrEqual(t, r.P99ms, r.P50ms, name)
	}
	t.Logf("smoke figures (3 runs, not a measurement): gated p50 %.2fms p99 %.2fms; ungated p50 %.2fms p99 %.2fms",
		byName["gated"].P50ms, byName["gated"].P99ms, byName["ungated"].P50ms, byName["ungated"].P99ms)

	res, err = RunSide(ctx, "floor", embedded.SyncInterval, Options{Scenarios: []string{"gated"}, Runs: 3})
	require.NoError(t, err)
	assert.Empty(t, res, "the floor has no rules: no row")
}
