package main

import (
	"encoding/json"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/benchmark"
)

func TestBenchCommand(t *testing.T) {
	t.Parallel()
	r := cli(t, "bench", "--runs", "5", "--parked", "20", "--concurrency", "2", "--sync", "interval", "--json")
	require.Equal(t, 0, r.code, r.err)
	var res []benchmark.Result
	require.NoError(t, json.Unmarshal([]byte(r.out), &res))
	require.Len(t, res, 8, "four scenarios, Interlock and the floor")
	for _, x := range res {
		switch x.Scenario {
		case "cycle":
			assert.Positive(t, x.PerSecond, "%+v", x)
			assert.Positive(t, x.BytesPerCycle, "%+v", x)
			if runtime.GOOS == "linux" {
				assert.Positive(t, x.CPUPerCycleMs, "%+v", x)
			}
			if x.Side == "floor" {
				assert.Equal(t, 8.0, x.MsgsPerCycle, "the floor's eight durable writes per cycle")
			} else {
				assert.Greater(t, x.MsgsPerCycle, 8.0, "Interlock's cycle writes the floor's eight and its events")
			}
		case "parked":
			assert.Positive(t, x.BytesPerRun, "%+v", x)
		default:
			assert.Positive(t, x.P99ms, "%+v", x)
			assert.GreaterOrEqual(t, x.P99ms, x.P50ms)
		}
	}
	assert.Contains(t, r.err, "cycle interlock sync=interval", "progress on stderr")
	r = cli(t, "bench", "--scenario", "cycle", "--runs", "3", "--sync", "interval")
	require.Equal(t, 0, r.code, r.err)
	assert.Regexp(t, `writes\s+interval\s+[\d.]+ msgs, \d+ B per cycle\s+8.0 msgs, \d+ B per cycle`, r.out)
	if runtime.GOOS == "linux" {
		assert.Regexp(t, `cpu\s+interval\s+[\d.]+ ms CPU per cycle\s+[\d.]+ ms CPU per cycle\s+[\d.]+ \(CPU\)`, r.out)
	}
	r = cli(t, "bench", "--scenario", "nope", "--runs", "1", "--sync", "interval")
	assert.Equal(t, exitUsage, r.code)
	r = cli(t, "bench", "--scenario", "paced", "--runs", "1", "--sync", "interval")
	assert.Equal(t, exitUsage, r.code, "paced needs --rate")
	r = cli(t, "bench", "--scenario", "paced", "--rate", "50", "--runs", "10", "--sync", "interval", "--json")
	require.Equal(t, 0, r.code, r.err)
	require.NoError(t, json.Unmarshal([]byte(r.out), &res))
	require.Len(t, res, 2)
	for _, x := range res {
		// A pacer never runs faster than asked; how close it comes to the
		// rate depends on the machine, which a test must not assert.
		assert.LessOrEqual(t, x.PerSecond, 50*1.25, "paced: never faster than the rate asked")
		assert.Positive(t, x.PerSecond)
		assert.Positive(t, x.P99ms)
	}
}
