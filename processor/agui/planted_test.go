package agui_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream/jstest"
)

// An answer stored under a thread's key is no thread record: it named ada
// the owner of a thread that had answered her request with eve's run, and
// ada's request was answered with eve's run, its question and arguments.
// Found by the fifth review of the eighth session.
func TestPlantedThreadRecordFollowsNothing(t *testing.T) {
	e := newEnv(t, 1)
	id := interrupts(t, e.run(0, "assistant", map[string]any{"threadId": "eve-s", "runId": "e1"}))[0]["id"].(string)
	run := e.runOf(id).RunID
	for i, bare := range []bool{true, false} {
		thread := []string{"stolen-bare", "stolen"}[i]
		forged, err := json.Marshal(map[string]any{"threadId": thread, "owner": "ada", "agent": "assistant", "runId": run,
			"requests": []any{map[string]any{"clientRunId": "a1", "runId": run}}})
		require.NoError(t, err)
		sum := sha256.Sum256([]byte(thread))
		nc, err := nats.Connect(e.srv.URL())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		jstest.Answer(t, nc, "INTERLOCK_AGUI", "interlock.agui.assistant.planted-"+thread, nil, forged, "KV_interlock_threads",
			"$KV.interlock_threads."+hex.EncodeToString(sum[:16]), bare)

		evs := e.runAs(0, adaToken, "assistant", map[string]any{"threadId": thread, "runId": "a1"})
		require.NotContains(t, fmt.Sprint(evs), id, "ada is shown eve's run through an answer stored under a thread's key (bare %v)", bare)
		got := interrupts(t, evs)
		require.Len(t, got, 1)
		assert.NotEqual(t, id, got[0]["id"], "ada follows eve's run through an answer stored under a thread's key (bare %v)", bare)
		assert.NotEqual(t, run, e.runOf(got[0]["id"].(string)).RunID)
	}
}
