package processor

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// A worker in any language: publish a suspension by hand, decide it, and see
// the replay work item arrive.
func TestSuspensionFromAnotherLanguage(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, nil)
	h.startCoordinator(nil)
	run, agent := "run-py-1", "py_agent"
	subject, err := h.admin.Namespace().Suspended(agent, run)
	require.NoError(t, err)
	body := `{"version":1,"runId":"run-py-1","agent":"py_agent","pass":0,"input":{"q":1},
		"interrupts":[{"id":"ask-1","reason":"input_required","message":"which account?",
		"responseSchema":{"type":"string"}}],"journal":{"/lookup#0":{"n":3}}}`
	ack, err := h.admin.Publish(h.ctx(), subject, []byte(body), run+":0", nil)
	require.NoError(t, err)
	assert.False(t, ack.Duplicate)

	// The same pass again with the same message id: the stream drops it.
	ack, err = h.admin.Publish(h.ctx(), subject, []byte(body), run+":0", nil)
	require.NoError(t, err)
	assert.True(t, ack.Duplicate, "a second suspension for the same pass is deduplicated")

	rec := h.suspendedAtPass(run, 0)
	require.Len(t, rec.Pending(), 1)

	// The same pass past the dedup window (another message id): the record
	// already holds it, so nothing changes and no second event is published.
	_, err = h.admin.Publish(h.ctx(), subject, []byte(body), "later-id", nil)
	require.NoError(t, err)
	// A pass the run never scheduled: recorded as stale, changes nothing.
	_, err = h.admin.Publish(h.ctx(), subject, []byte(strings.Replace(body, `"pass":0`, `"pass":3`, 1)), run+":3", nil)
	require.NoError(t, err)
	stale := h.waitEvents(run, subjects.EventInputRejected, 1)
	assert.Equal(t, subjects.CodeStalePass, stale[0].Code)
	assert.Equal(t, 3, stale[0].Pass)
	again, err := h.client.Run(h.ctx(), run)
	require.NoError(t, err)
	assert.Equal(t, rec.Interrupts, again.Interrupts)
	assert.Equal(t, 0, again.Pass)
	assert.Len(t, h.events(run, subjects.EventSuspended), 1)

	v := h.decide(run, "ask-1", subjects.StatusResolved, "savings")
	assert.True(t, v.Replay)
	workSubject, _ := h.admin.Namespace().Work(agent)
	var work subjects.Work
	require.Eventually(t, func() bool {
		msgs, err := h.admin.Messages(h.ctx(), jetstream.StreamWork, workSubject, 0, 10)
		require.NoError(t, err)
		if len(msgs) != 1 {
			return false
		}
		work, err = subjects.DecodeWork(msgs[0].Data)
		require.NoError(t, err)
		return true
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, 1, work.Pass)
	assert.JSONEq(t, `{"q":1}`, string(work.Input))
	require.Len(t, work.Decisions, 1)
	assert.JSONEq(t, `"savings"`, string(work.Decisions[0].Payload))
	assert.JSONEq(t, `{"n":3}`, string(work.Journal["/lookup#0"]))
}

func TestMalformedOutcomeIsDeadLettered(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, nil)
	h.startCoordinator(nil)
	subject, _ := h.admin.Namespace().Suspended("agent", "run-bad")
	cases := []string{
		`not json`,
		`{"version":1,"runId":"run-bad","agent":"agent","pass":0,"interrupts":[]}`,
		`{"version":1,"runId":"other","agent":"agent","pass":0,"interrupts":[{"id":"i","reason":"r"}]}`,
	}
	for i, body := range cases {
		_, err := h.admin.Publish(h.ctx(), subject, []byte(body), "malformed-"+strconv.Itoa(i), nil)
		require.NoError(t, err, "case %d", i)
	}
	evs := h.waitEvents("run-bad", subjects.EventInputRejected, len(cases))
	for _, e := range evs {
		assert.Equal(t, subjects.CodeMalformed, e.Code)
		assert.NotEmpty(t, e.Detail)
	}
	dlq, _ := h.admin.Namespace().DeadLetter("coordinator_runs")
	var msgs []jetstream.StoredMsg
	require.Eventually(t, func() bool {
		var err error
		msgs, err = h.admin.Messages(h.ctx(), jetstream.StreamDLQ, dlq, 0, 10)
		return err == nil && len(msgs) == len(cases)
	}, 10*time.Second, 20*time.Millisecond)
	for i, m := range msgs {
		assert.Equal(t, cases[i], string(m.Data), "the message is kept as it was")
		assert.Equal(t, subject, m.Header.Get(jetstream.HeaderDLQSubject))
		assert.Contains(t, m.Header.Get(jetstream.HeaderDLQReason), "malformed")
	}
	// The second names the run, its agent and its first pass: that pass can
	// go no further (its worker acked the work item), so the run fails with
	// the reason rather than never getting a record.
	rec, err := h.client.Run(h.ctx(), "run-bad")
	require.NoError(t, err)
	assert.Equal(t, subjects.RunFailed, rec.Status)
	assert.Contains(t, rec.Error, "malformed")
	var ev subjects.Event
	require.NoError(t, json.Unmarshal(mustJSON(t, evs[0]), &ev))
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
