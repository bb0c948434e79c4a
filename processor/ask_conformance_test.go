package processor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/subjects"
)

// TestConformanceAsk holds the worker's asks (WorkerConfig.AskRules) to
// testdata/conformance/ask.json, which the Python and TypeScript SDKs'
// tests read too: the ask body, which coordinator replies a worker takes,
// and the journal key of a taken decision.
func TestConformanceAsk(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "conformance", "ask.json"))
	require.NoError(t, err)
	var vec struct {
		Requests []struct {
			Name, RunID, Agent, Requester string
			Pass                          int
			Interrupt                     subjects.Interrupt
			Body                          json.RawMessage
		}
		Replies []struct {
			Name, InterruptID, Raw string
			Reply                  json.RawMessage
			Takes                  bool
		}
		JournalKeys []struct{ InterruptID, Key string }
	}
	require.NoError(t, json.Unmarshal(data, &vec))
	require.NotEmpty(t, vec.Requests)
	require.NotEmpty(t, vec.Replies)
	require.NotEmpty(t, vec.JournalKeys)
	for _, v := range vec.Requests {
		got, err := json.Marshal(askOf(v.RunID, v.Agent, v.Pass, v.Requester, v.Interrupt))
		require.NoError(t, err)
		assert.JSONEq(t, string(v.Body), string(got), v.Name)
		_, err = subjects.DecodeAsk(v.Body)
		assert.NoError(t, err, v.Name)
	}
	for _, v := range vec.Replies {
		if v.Raw != "" {
			v.Reply = json.RawMessage(v.Raw)
		}
		d, ok := takeAskReply(v.Reply, v.InterruptID)
		assert.Equal(t, v.Takes, ok, v.Name)
		if ok {
			var r struct{ Decision json.RawMessage }
			require.NoError(t, json.Unmarshal(v.Reply, &r))
			got, err := json.Marshal(d)
			require.NoError(t, err)
			assert.JSONEq(t, string(r.Decision), string(got), v.Name)
		}
	}
	for _, v := range vec.JournalKeys {
		assert.Equal(t, v.Key, askKey(v.InterruptID))
	}
}
