package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor/store"
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
		assert.Len(t, h.waitEvents(r, subjects.EventCompleted, 1), 1, r) // the event follows the record
	}
}

// TestRecordLostWithItsCrashIsAppliedOnce: the coordinator dies right after
// writing a record (in memory) and before the event that carries its copy,
// and the server restarts, so the write is gone from everywhere. The input
// that caused it is delivered again and applied once: nothing it caused
// was stored before its copy was.
func TestRecordLostWithItsCrashIsAppliedOnce(t *testing.T) {
	t.Parallel()
	// (No outcome-after-index: with records in memory the entry is put
	// after the copy, TestSealedSuspensionIndexedAfterItsCopy.)
	for _, point := range []string{"outcome-after-record", "decision-after-record"} {
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
			assert.Len(t, h.waitEvents(run, subjects.EventCompleted, 1), 1) // the event follows the record
			assert.Equal(t, 1, rec.Pass, "two passes, no more")
		})
	}
}

// rawJS is a plain JetStream connection to h's server, for what an
// operator or a restart does behind the roles' backs.
func rawJS(t *testing.T, h *harness) natsjs.JetStream {
	t.Helper()
	nc, err := nats.Connect(h.srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	return js
}

// purgeBucket empties bucket as a server restart empties one in memory.
func purgeBucket(t *testing.T, h *harness, js natsjs.JetStream, bucket string) {
	t.Helper()
	st, err := js.Stream(context.Background(), h.admin.BucketStreamName(bucket))
	require.NoError(t, err)
	require.NoError(t, st.Purge(context.Background()))
}

// TestRecordLostUnderARunningCoordinator: the bucket loses the decision's
// record write after it was made and before the event carrying its copy
// is stored, and the older copy is put back meanwhile; the coordinator did
// not crash. It finds the bucket no longer holds what it wrote before it
// queues anything, and the decision is applied again to what is there:
// the run completes, its body run once per pass (found by review: the
// replay was queued and acknowledged, its outcome refused as stale, the
// run suspended for ever).
func TestRecordLostUnderARunningCoordinator(t *testing.T) {
	t.Parallel()
	var calls counter
	h, _ := newRecordsHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&calls)})
	js := rawJS(t, h)
	var run string
	var once sync.Once
	hook := func(point string) bool {
		if point != "decision-after-record" {
			return false
		}
		once.Do(func() {
			purgeBucket(t, h, js, jetstream.RunsBucket)
			// The coordinator's own index check puts the copies back.
			assert.Eventually(t, func() bool {
				rec, err := h.client.Run(context.Background(), run)
				return err == nil && rec.Status == subjects.RunSuspended
			}, waitLimit, 20*time.Millisecond, "the older copy put back")
		})
		return false
	}
	h.startWorker(nil)
	h.startCoordinator(hook)
	run = h.start("refunds", nil)
	rec := h.suspendedAtPass(run, 0)
	h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, map[string]any{"amount": 5})
	rec = h.waitFor(run, Finished)
	require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)
	assert.Equal(t, 2, calls.get("body"), "two passes")
	assert.Len(t, h.replays(run), 1, "one replay scheduled")
	assert.Empty(t, h.events(run, subjects.EventInputRejected))
}

// waitingRunStopped is a records-in-memory harness with a run waiting for
// a decision (listed), a worker, and its coordinator stopped.
func waitingRunStopped(t *testing.T) (*harness, natsjs.JetStream, *subjects.Run) {
	t.Helper()
	h, _ := newRecordsHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&counter{})})
	js := rawJS(t, h)
	co := h.startCoordinator(nil)
	h.startWorker(nil)
	rec := h.suspendedAtPass(h.start("refunds", nil), 0)
	require.Eventually(t, func() bool { p, err := h.client.Pending(h.ctx()); return err == nil && len(p) == 1 },
		waitLimit, 20*time.Millisecond)
	require.NoError(t, co.Stop(context.Background()))
	return h, js, rec
}

// TestIndexWaitsForAnotherRestore: another coordinator holds a fresh claim
// on putting the records back; this one's index check does not build the
// index from the still empty bucket, but once the records are back (found
// by review: built empty and marked built, the waiting run listed nowhere).
func TestIndexWaitsForAnotherRestore(t *testing.T) {
	t.Parallel()
	h, js, _ := waitingRunStopped(t)
	for _, b := range []string{jetstream.RunsBucket, jetstream.PendingBucket} {
		purgeBucket(t, h, js, b)
	}
	// Coordinator B claims the restore, and is slow.
	m := nats.NewMsg("$KV." + h.admin.BucketName(jetstream.RunsBucket) + "._.records")
	m.Header.Set("KV-Operation", "DEL")
	m.Header.Set(nats.MsgIdHdr, "coordinator-B-claim") // a marker is a client's publish, with its id
	m.Data = []byte(`{"state":"restoring","by":"coordinator-B","at":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}`)
	_, err := js.PublishMsg(context.Background(), m)
	require.NoError(t, err)

	h.startCoordinator(nil)
	// B finishes: a store of B's, its claim its own.
	signer, err := h.admin.IDSigner(h.ctx())
	require.NoError(t, err)
	b := store.NewJetStream(h.conn())
	b.UseRecordKey(signer.RecordKey(), true, true)
	r, err := b.RestoreRecords(h.ctx(), "coordinator-B", time.Now(), nil)
	require.NoError(t, err)
	require.True(t, r.Ran && r.Whole)
	assert.Equal(t, 1, r.Runs)
	require.Eventually(t, func() bool { p, err := h.client.Pending(h.ctx()); return err == nil && len(p) == 1 },
		waitLimit, 20*time.Millisecond, "the waiting run listed once its record is back")
}

// TestRecordTooLargeForItsCopy: a record that fits the server's max
// payload but whose sealed copy would not fit the event carrying it is
// refused as too large, as a record over the max payload is: the run
// fails with its reason, audited (found by review: the copy's event was
// refused on every delivery, the input dead-lettered, the record in memory
// with no copy anywhere).
func TestRecordTooLargeForItsCopy(t *testing.T) {
	t.Parallel()
	const maxPayload = 64 << 10
	cfg := sized(embedded.Config{DataDir: t.TempDir()}, maxPayload)
	h := &harness{t: t, srv: jstest.Server(t, cfg), nats: []jetstream.Config{recordsInMemory}}
	h.admin = h.conn()
	h.client = NewClient(h.admin)
	h.startCoordinator(nil)
	result, err := json.Marshal(strings.Repeat("x", 56<<10))
	require.NoError(t, err)
	run := "run-big"
	c := subjects.Completion{PassRef: subjects.PassRef{Version: subjects.Version, RunID: run, Agent: "agent"},
		Result: result, CompletedAt: time.Now().UTC()}
	data, err := json.Marshal(c)
	require.NoError(t, err)
	subject, err := h.admin.Namespace().Completed("agent", run)
	require.NoError(t, err)
	_, err = h.admin.Publish(h.ctx(), subject, data, "copy-test:0", nil)
	require.NoError(t, err, "the completion fits the server (%d bytes)", len(data))
	rec := h.waitFor(run, Finished)
	assert.Equal(t, subjects.RunFailed, rec.Status)
	assert.Contains(t, rec.Error, "too large")
	assert.NotEmpty(t, h.waitEvents(run, subjects.EventFailed, 1))
	assert.NotEmpty(t, h.waitEvents(run, subjects.EventInputRejected, 1))
}

// TestRecordsPutBackIntoABucketOnDisk: a single server restarted under
// per-role permissions lost the runs bucket (in memory); admin provisions
// again with the defaults, which create it on disk; the coordinator that
// starts then puts the records back into it from the trail (found by
// review: it sealed nothing and restored nothing, every run gone).
func TestRecordsPutBackIntoABucketOnDisk(t *testing.T) {
	t.Parallel()
	h, js, rec := waitingRunStopped(t)
	run := rec.RunID
	require.NoError(t, js.DeleteStream(context.Background(), h.admin.BucketStreamName(jetstream.RunsBucket)))
	require.NoError(t, jstest.Client(t, h.srv).Provision(context.Background()))
	h.nats = nil
	h.startCoordinator(nil)
	back, err := h.client.Run(h.ctx(), run)
	require.NoError(t, err, "put back when the coordinator started")
	assert.Equal(t, rec.Writes, back.Writes)
	h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, map[string]any{"amount": 5})
	assert.Equal(t, subjects.RunCompleted, h.waitFor(run, Finished).Status)
}

// TestSealedSuspensionIndexedAfterItsCopy: with records in memory, a
// suspension's pending entry is stored after the event that carries the
// record's copy. Put before it (found by review), the entry could outlive
// a record write the bucket lost; a build of the index then removed it as
// nothing backed it, and the suspension, applied again, put it with the
// same message id, deduplicated: the run waited unlisted for good.
func TestSealedSuspensionIndexedAfterItsCopy(t *testing.T) {
	t.Parallel()
	h, _ := newRecordsHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&counter{})})
	nc, err := nats.Connect(h.srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	// Core NATS delivers one connection's publishes in order: the order
	// the coordinator stored them in.
	var mu sync.Mutex
	var seen []string
	record := func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		kind := "index " + m.Subject
		if strings.HasPrefix(m.Subject, "interlock.events.") {
			kind = "event " + m.Subject
			if bytes.Contains(m.Data, []byte(`"record":`)) {
				kind += " with the copy"
			}
		}
		seen = append(seen, kind)
	}
	_, err = nc.Subscribe("$KV."+h.admin.BucketName(jetstream.PendingBucket)+".>", record)
	require.NoError(t, err)
	_, err = nc.Subscribe("interlock.events.>", record)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	h.startWorker(nil)
	h.startCoordinator(nil)
	run := h.start("refunds", nil)
	h.suspendedAtPass(run, 0)
	var ofRun []string
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		ofRun = ofRun[:0]
		for _, s := range seen {
			if strings.Contains(s, "."+run+".") {
				ofRun = append(ofRun, s)
			}
		}
		return len(ofRun) >= 2
	}, waitLimit, 10*time.Millisecond, "the suspension's event and entry")
	require.Equal(t, "event interlock.events."+run+".suspended with the copy", ofRun[0], "first of the run's writes: %v", ofRun)
	assert.True(t, strings.HasPrefix(ofRun[1], "index "), "then the entry: %v", ofRun)
}

// TestRunsLostUnderAnIndexBuild: the runs bucket (in memory) is lost while
// a build of the index reads it, so the build's pages end early. The build
// must not mark the index built (found by review: it did, and the waiting
// interrupts it had not reached stayed unlisted for good); once the records
// are back, the next build lists every one. Lost as a restart empties it,
// and deleted and created again, which restarts its sequences: put back,
// the records' marker then lands on the sequence it had when the build
// started (found by the second review: a check of the sequence alone
// passed).
func TestRunsLostUnderAnIndexBuild(t *testing.T) {
	t.Parallel()
	for _, created := range []bool{false, true} {
		t.Run(map[bool]string{false: "emptied", true: "created again"}[created], func(t *testing.T) {
			t.Parallel()
			h, _ := newRecordsHarness(t, map[string]AgentFunc{"refunds": approvalAgent(&counter{})})
			js := rawJS(t, h)
			lose := func() { purgeBucket(t, h, js, jetstream.RunsBucket) }
			if created {
				lose = func() {
					require.NoError(t, js.DeleteStream(context.Background(), h.admin.BucketStreamName(jetstream.RunsBucket)))
					require.NoError(t, h.admin.ProvisionRuns(context.Background(), jetstream.MemoryStorage))
				}
			}
			h.startWorker(nil)
			h.startCoordinator(nil)
			const n = 260 // more than one page of records (indexPage)
			runs := h.suspendedRuns("refunds", n)
			h.waitListed(n)
			h.waitEvents(subjects.NoRun, subjects.EventPendingIndexBuilt, 1)
			require.NoError(t, h.co.Stop(context.Background()))

			// The index lost whole (its marker with it), and a coordinator
			// whose build finds the records gone after its first page.
			if created {
				lose() // so that the restore under the build repeats this one's sequences
			}
			purgeBucket(t, h, js, jetstream.PendingBucket)
			var once sync.Once
			h.startCoordinator(func(point string) bool {
				if point == "index-after-page" {
					once.Do(lose)
				}
				return false
			})
			h.waitListed(n)
			for _, r := range runs[:3] {
				assert.Equal(t, subjects.RunSuspended, h.suspendedAtPass(r, 0).Status, r)
			}
		})
	}
}
