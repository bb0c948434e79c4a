package main

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDemoUnattended(t *testing.T) {
	t.Parallel()
	r := cli(t, "demo", "--auto-approve", "--log-level", "warn")
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, "suspended: the run waits for a decision")
	assert.Contains(t, r.out, `completed after 2 passes: {"refunded":true,"amount":42.5,"approver":"demo"}`)
	assert.Equal(t, 1, strings.Count(r.out, "step: looked up order"), "the journaled step runs once")

	r = cli(t, "demo", "--auto-deny", "--json", "--log-level", "warn")
	require.Equal(t, 0, r.code, r.err)
	var last map[string]any
	var events []string
	sc := bufio.NewScanner(strings.NewReader(r.out))
	for sc.Scan() {
		last = nil
		require.NoError(t, json.Unmarshal(sc.Bytes(), &last), sc.Text())
		events = append(events, last["event"].(string))
	}
	assert.Equal(t, []string{"started", "suspended", "completed"}, events)
	res := last["result"].(map[string]any)
	assert.Equal(t, false, res["refunded"])
	assert.Contains(t, res["note"], "denied")

	r = cli(t, "demo", "--auto-approve", "--auto-deny")
	assert.Equal(t, exitUsage, r.code)
}
