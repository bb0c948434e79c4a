package processor

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/subjects"
)

// recordsInMemory is the configuration of a deployment whose runs bucket
// keeps the records in memory (jetstream.Config.RecordsStorage).
var recordsInMemory = jetstream.Config{RecordsStorage: jetstream.MemoryStorage}

// newRecordsHarness is a harness on a server with a data directory (so it
// can restart with its streams) whose runs bucket is in memory.
func newRecordsHarness(t *testing.T, agents map[string]AgentFunc) (*harness, embedded.Config) {
	t.Helper()
	cfg := embedded.Config{DataDir: t.TempDir()}
	h := &harness{t: t, srv: jstest.Server(t, cfg), agents: agents, nats: []jetstream.Config{recordsInMemory}}
	h.admin = h.conn()
	h.client = NewClient(h.admin)
	return h, cfg
}

// rawEvents are the bodies of every event stored for run, as any reader of
// the trail (an approver) gets them.
func (h *harness) rawEvents(run string) [][]byte {
	h.t.Helper()
	filter, err := h.admin.Namespace().RunEvents(run)
	require.NoError(h.t, err)
	msgs, err := h.admin.Messages(h.ctx(), jetstream.StreamEvents, filter, 1, 1000)
	require.NoError(h.t, err)
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = m.Data
	}
	return out
}

// TestRecordsInMemoryPutBackAfterNATSRestart: with the runs bucket in
// memory a server restart empties it; the coordinator puts every record
// back from the sealed copies the audit trail carries, the waiting runs are
// listed and decided again, and every body ran as often as without the
// restart. The trail's readers see ciphertext, never the answers.
func TestRecordsInMemoryPutBackAfterNATSRestart(t *testing.T) {
	t.Parallel()
	var calls counter
	h, cfg := newRecordsHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&calls)})
	h.startCoordinator(nil)
	h.startWorker(nil)
	var runs []string
	for range 6 {
		runs = append(runs, h.start("refunds", nil))
	}
	for _, r := range runs {
		h.suspendedAtPass(r, 0)
	}
	const secret = "answer-only-the-record-holds"
	for _, r := range runs[:2] {
		rec, err := h.client.Run(h.ctx(), r)
		require.NoError(t, err)
		h.decide(r, rec.Pending()[0].ID, subjects.StatusResolved, map[string]any{"amount": 2, "note": secret})
		assert.Equal(t, subjects.RunCompleted, h.waitFor(r, Finished).Status)
	}
	restores := h.waitEvents(subjects.NoRun, subjects.EventRecordsRestored, 1)
	assert.True(t, strings.HasPrefix(restores[0].Detail, "0 run records put back"), restores[0].Detail)

	// What an approver reading the whole trail sees: a copy on every
	// transition's event, sealed; the answer nowhere.
	for _, r := range runs[:2] {
		sealed := 0
		for _, raw := range h.rawEvents(r) {
			assert.NotContains(t, string(raw), secret, "the trail carries the answer in the clear")
			if bytes.Contains(raw, []byte(`"record":"`)) {
				sealed++
			}
		}
		assert.Equal(t, 3, sealed, "copies of run %s's three record writes", r)
		evs, err := h.client.Events(h.ctx(), r)
		require.NoError(t, err)
		for _, ev := range evs {
			assert.Empty(t, ev.Record, "readers get no copy")
		}
	}

	h.srv = jstest.Restart(t, h.srv, cfg)
	restores = h.waitEvents(subjects.NoRun, subjects.EventRecordsRestored, 2)
	want := fmt.Sprintf("%d run records put back", len(runs))
	assert.True(t, strings.HasPrefix(restores[1].Detail, want), "%s, want %s", restores[1].Detail, want)
	for i, r := range runs {
		rec, err := h.client.Run(h.ctx(), r)
		require.NoError(t, err, r)
		if i < 2 {
			assert.Equal(t, subjects.RunCompleted, rec.Status, r)
			assert.Contains(t, string(rec.Result), `"amount":2`)
			continue
		}
		assert.Equal(t, subjects.RunSuspended, rec.Status, r)
	}
	require.Eventually(t, func() bool {
		p, err := h.client.Pending(h.ctx())
		return err == nil && len(p) == len(runs)-2
	}, waitLimit, 20*time.Millisecond, "the waiting runs listed again")
	h.approveAll(runs[2:])
	assert.Equal(t, 2*len(runs), calls.get("body"), "two passes a run, no more")
	assert.Equal(t, len(runs), calls.get("step"), "the journaled step once a run")
	for _, r := range runs {
		assert.Len(t, h.events(r, subjects.EventDecisionAccepted), 1, r)
		assert.Len(t, h.events(r, subjects.EventCompleted), 1, r)
	}
}

// TestRecordLostWithItsCrashIsAppliedOnce: the coordinator dies right after
// writing a record (in memory) and before the event that carries its copy,
// and the server restarts, so the write is gone from everywhere. The input
// that caused it is delivered again and applied once: nothing it caused
// was stored before its copy was.
func TestRecordLostWithItsCrashIsAppliedOnce(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"outcome-after-record", "outcome-after-index", "decision-after-record"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			var calls counter
			h, cfg := newRecordsHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&calls)})
			hook, crashed := fault.Once(point)
			h.startWorker(nil)
			h.startCoordinator(hook)
			run := h.start("refunds", nil)
			firstPass := strings.HasPrefix(point, "outcome-")
			restart := func() {
				<-crashed
				h.srv = jstest.Restart(t, h.srv, cfg)
				h.startCoordinator(nil)
			}
			if firstPass {
				restart()
			}
			rec := h.suspendedAtPass(run, 0)
			if !firstPass {
				dctx, cancel := context.WithCancel(h.ctx())
				go func() { <-crashed; cancel() }()
				_, err := h.client.Decide(dctx, DecisionRequest{RunID: run, InterruptID: rec.Pending()[0].ID,
					Status: subjects.StatusResolved, Payload: map[string]any{"amount": 5}, DecisionID: "the-decision"})
				cancel()
				if err != nil {
					require.ErrorIs(t, err, context.Canceled)
				}
				restart()
			} else {
				h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, map[string]any{"amount": 5})
			}
			rec = h.waitFor(run, Finished)
			require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)
			assert.Equal(t, 1, calls.get("step"), "journaled step runs")
			assert.Equal(t, 2, calls.get("body"), "two passes")
			assert.Len(t, h.events(run, subjects.EventSuspended), 1, "one suspension event")
			assert.Len(t, h.events(run, subjects.EventDecisionAccepted), 1, "decision applied once")
			assert.Len(t, h.replays(run), 1, "one replay scheduled")
			assert.Len(t, h.events(run, subjects.EventCompleted), 1)
			assert.Equal(t, 1, rec.Pass, "two passes, no more")
		})
	}
}
