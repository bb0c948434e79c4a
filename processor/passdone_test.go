package processor

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/subjects"
)

// TestPassDoneAfterALateNotice: the coordinator publishes an expiry's
// notice (about the pass that waited) after it queued the replay, so the
// replay's completion can be stored before it. A worker that took the
// replay's work item again (it stopped after reporting, before its ack)
// read the notice as the last word, a pass before the replay's, and ran
// the replay a second time. The pass is done: its outcome is there.
func TestPassDoneAfterALateNotice(t *testing.T) {
	t.Parallel()
	c := jstest.Client(t, jstest.Server(t))
	ns := c.Namespace()
	ctx := context.Background()
	w := NewWorker(c, WorkerConfig{})
	const run, key = "late-1", "the-pass-key"
	replay := subjects.Work{PassRef: subjects.PassRef{Version: subjects.Version, Agent: "refunds", RunID: run, Pass: 1}}
	done, err := w.passDone(ctx, replay, key)
	require.NoError(t, err)
	require.False(t, done)

	completed, err := ns.Completed("refunds", run)
	require.NoError(t, err)
	data, err := json.Marshal(subjects.Completion{PassRef: replay.PassRef, Result: json.RawMessage(`1`), CompletedAt: time.Now()})
	require.NoError(t, err)
	_, err = c.Publish(ctx, completed, data, subjects.OutcomeMsgID(run, 1, key), nil)
	require.NoError(t, err)
	done, err = w.passDone(ctx, replay, key)
	require.NoError(t, err)
	require.True(t, done, "its completion is the last message")

	expired, err := ns.Notice(subjects.KindExpired, "refunds", run)
	require.NoError(t, err)
	notice, err := json.Marshal(subjects.Notice{PassRef: subjects.PassRef{Version: subjects.Version, Agent: "refunds", RunID: run, Pass: 0},
		Kind: subjects.KindExpired, At: time.Now()})
	require.NoError(t, err)
	_, err = c.Publish(ctx, expired, notice, "", nil)
	require.NoError(t, err)
	done, err = w.passDone(ctx, replay, key)
	require.NoError(t, err)
	assert.True(t, done, "a late notice about the pass that waited hides nothing")

	// A replay whose outcome is not there is still not done behind a notice.
	next := replay
	next.Pass = 2
	done, err = w.passDone(ctx, next, key)
	require.NoError(t, err)
	assert.False(t, done)
}
