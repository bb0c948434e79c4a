package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// TestDiskCopyPutBackOnlyWhenLatest: with records on disk, a record an
// answer replaced is put back from the latest copy in its run's trail, but
// only when no entry after that copy tells of a later write: one written
// by a coordinator that writes no copies (an older one, in a rolling
// upgrade), or one whose copy was not stored. Putting back the older copy
// then would open a decided interrupt again, to be decided twice; the run
// stays stopped instead, as it did before records on disk carried copies.
func TestDiskCopyPutBackOnlyWhenLatest(t *testing.T) {
	t.Parallel()
	// Each case writes what comes after the copy; the copy is put back
	// only for the first two.
	type after = func(t *testing.T, s *store.JetStream, c *jetstream.Client, run string)
	putBack := map[string]bool{"nothing after the copy": true, "an entry of no record write": true}
	for name, later := range map[string]after{
		"nothing after the copy": nil,
		// An entry the coordinator writes after a record write without
		// changing the record (a decision it accepts and that changes
		// nothing: a cancel of an interrupt that expired): it names no
		// later write. (It turned put-backs off for good; found by the
		// review of the change that put copies on disk.)
		"an entry of no record write": func(t *testing.T, s *store.JetStream, _ *jetstream.Client, run string) {
			require.NoError(t, s.Commit(context.Background(), store.Effects{Events: []store.Event{{Event: subjects.Event{
				Version: subjects.Version, Type: subjects.EventDecisionAccepted, RunID: run, Agent: "refunds", At: time.Now(),
				Verdict: &subjects.Verdict{Approver: "ada", Outcome: subjects.OutcomeAccepted}}, Dedup: "noop"}}}))
		},
		"a write by a coordinator that writes no copies": func(t *testing.T, _ *store.JetStream, c *jetstream.Client, run string) {
			old := store.NewJetStream(c)
			rec, err := store.Update(context.Background(), old, run, func(r *subjects.Run) (*subjects.Run, error) {
				if r == nil {
					return nil, nil // its guess that the run is new: read, and asked again
				}
				next := *r
				next.Status = subjects.RunCompleted
				return &next, nil
			})
			require.NoError(t, err)
			require.NoError(t, old.Commit(context.Background(), store.Effects{Record: rec, Events: []store.Event{{
				Event: subjects.Event{Version: subjects.Version, Type: subjects.EventCompleted, RunID: run, Agent: "refunds",
					At: time.Now()}, Dedup: "done"}}}))
		},
		"a later write whose copy was not stored": func(t *testing.T, _ *store.JetStream, c *jetstream.Client, run string) {
			m, err := store.EventMsg(c.Namespace(), store.Event{Event: subjects.Event{Version: subjects.Version,
				Type: subjects.EventCompleted, RunID: run, Agent: "refunds", At: time.Now()}, Dedup: "done"})
			require.NoError(t, err)
			_, err = c.Publish(context.Background(), m.Subject, m.Data, m.MsgID, jetstream.Header{jetstream.HeaderRecordWrites: {"2"}})
			require.NoError(t, err)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, c, nc := diskStore(t, jetstream.Config{})
			ctx := context.Background()
			suspendedRun(t, s)
			if later != nil {
				later(t, s, c, "r1")
			}
			replaceRecord(t, c, nc, "r1")

			got, _, err := s.Run(ctx, "r1")
			if putBack[name] {
				require.NoError(t, err, "the latest copy is put back")
				require.Equal(t, subjects.RunSuspended, got.Status)
				require.Equal(t, uint64(1), got.Writes)
				return
			}
			require.ErrorIs(t, err, store.ErrForeignRecord, "an older copy than the last write is not put back")
		})
	}
}

// diskStore is a store sealing copies with sealKey over a server whose runs
// bucket is on disk, its client, and a plain connection to the server.
func diskStore(t *testing.T, cfg jetstream.Config) (*store.JetStream, *jetstream.Client, *nats.Conn) {
	t.Helper()
	srv := jstest.Server(t)
	c := jstest.Client(t, srv, cfg)
	s := store.NewJetStream(c)
	s.UseRecordKey(sealKey, false, false)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return s, c, nc
}

// replaceRecord has an answer stored over run's record, as the server
// stores a JetStream API answer for any user, and waits until it is.
func replaceRecord(t *testing.T, c *jetstream.Client, nc *nats.Conn, run string) {
	t.Helper()
	require.NoError(t, nc.Publish("$KV."+c.BucketName(jetstream.RunsBucket)+"."+run,
		[]byte(`{"type":"io.nats.jetstream.api.v1.consumer_info_response"}`)))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool {
		_, _, err := store.NewJetStream(c).Run(context.Background(), run)
		return errors.Is(err, store.ErrForeignRecord)
	}, 10*time.Second, 10*time.Millisecond, "the answer is stored over the record")
}

// TestDiskPutBackRacingACommitStopsIt: a change wrote record 2 and is
// about to commit its effects when an answer replaces the record and
// another input of the run (another consumer, another coordinator) puts
// copy 1 back: copy 2 is not stored yet. The commit must then fail, its
// effects unstored, so that its input is applied again to what the bucket
// holds. Before, on disk, the copy rode with the effects and nothing
// checked: the effects went out (a replay queued, an approval answered
// accepted) over a record that says the interrupt is still open, to be
// decided again. Found by the review of the change that put copies on
// disk.
func TestDiskPutBackRacingACommitStopsIt(t *testing.T) {
	t.Parallel()
	s, c, nc := diskStore(t, jetstream.Config{})
	other := store.NewJetStream(c)
	other.UseRecordKey(sealKey, false, false)
	ctx := context.Background()
	rec1 := suspendedRun(t, s)
	rec2, err := store.Update(ctx, s, "r1", func(r *subjects.Run) (*subjects.Run, error) {
		next := *rec1
		next.Status = subjects.RunResuming
		return &next, nil
	})
	require.NoError(t, err)
	require.Equal(t, uint64(2), rec2.Writes)

	replaceRecord(t, c, nc, "r1")
	got, _, err := other.Run(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, uint64(1), got.Writes, "copy 1, the latest stored, put back over the answer")

	fx := transition("r1", rec2.Writes, "decided")
	fx.Record = rec2
	fx.Events = append(fx.Events, store.Event{Event: subjects.Event{Version: subjects.Version, Type: subjects.EventCompleted,
		RunID: "r1", Agent: "refunds", At: time.Now()}, Dedup: "decided-effect"})
	require.Error(t, s.Commit(ctx, fx), "a commit whose record is no longer the bucket's")
	evs, _, err := s.Events(ctx, "r1", 0)
	require.NoError(t, err)
	for _, ev := range evs {
		require.NotEqual(t, subjects.EventCompleted, ev.Type, "an effect of the lost write was stored")
	}
}

// TestDiskCopyStoredAgainDoesNotHideALaterWrite: a pull's answer keeps
// the stored message's subject and headers, so a role that may pull the
// trail's decision events (the gateway) can have the event carrying copy
// 1 stored again, after the duplicate window, behind an older
// coordinator's write 2 (no copy). latestCopy took the copy stored again
// for the latest and forgot the write after the first: copy 1 was put
// back over write 2. Found by the same review.
func TestDiskCopyStoredAgainDoesNotHideALaterWrite(t *testing.T) {
	t.Parallel()
	s, c, nc := diskStore(t, jetstream.Config{DuplicateWindow: 200 * time.Millisecond})
	ctx := context.Background()
	rec1, err := store.Update(ctx, s, "r1", func(*subjects.Run) (*subjects.Run, error) {
		return &subjects.Run{Version: subjects.Version, RunID: "r1", Agent: "refunds", Status: subjects.RunResuming}, nil
	})
	require.NoError(t, err)
	require.NoError(t, s.Commit(ctx, store.Effects{Record: rec1, Events: []store.Event{{Event: subjects.Event{
		Version: subjects.Version, Type: subjects.EventDecisionAccepted, RunID: "r1", Agent: "refunds", At: time.Now(),
		Verdict: &subjects.Verdict{Approver: "ada", Outcome: subjects.OutcomeAccepted}}, Dedup: "seq1"}}}))
	old := store.NewJetStream(c) // a coordinator of an earlier version: no copies
	rec2, err := store.Update(ctx, old, "r1", func(r *subjects.Run) (*subjects.Run, error) {
		if r == nil {
			return nil, nil
		}
		next := *r
		next.Status = subjects.RunCompleted
		return &next, nil
	})
	require.NoError(t, err)
	require.NoError(t, old.Commit(ctx, store.Effects{Record: rec2, Events: []store.Event{{Event: subjects.Event{
		Version: subjects.Version, Type: subjects.EventCompleted, RunID: "r1", Agent: "refunds", At: time.Now()}, Dedup: "pass1"}}}))

	// The gateway's pull, answered into the run's trail, until the
	// duplicate window lets the copy's entry be stored again.
	js, err := natsjs.New(nc)
	require.NoError(t, err)
	filter, err := c.Namespace().Events("r1", subjects.EventDecisionAccepted)
	require.NoError(t, err)
	pulls := 0
	require.Eventually(t, func() bool {
		pulls++
		name := fmt.Sprintf("puller%d", pulls)
		_, err := js.CreateOrUpdateConsumer(ctx, c.StreamName(jetstream.StreamEvents), natsjs.ConsumerConfig{
			Durable: name, FilterSubject: filter, AckPolicy: natsjs.AckNonePolicy})
		require.NoError(t, err)
		require.NoError(t, nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+c.StreamName(jetstream.StreamEvents)+"."+name,
			filter, []byte(`{"batch":1,"expires":2000000000}`)))
		var stored int
		require.Eventually(t, func() bool {
			evs, _, err := s.Events(ctx, "r1", 0)
			require.NoError(t, err)
			stored = 0
			for _, ev := range evs {
				if ev.Type == subjects.EventDecisionAccepted {
					stored++
				}
			}
			return stored > 0
		}, 5*time.Second, 10*time.Millisecond)
		return stored == 2
	}, 20*time.Second, 100*time.Millisecond, "the copy's entry stored again")

	replaceRecord(t, c, nc, "r1")
	got, _, err := s.Run(ctx, "r1")
	if err == nil {
		t.Logf("put back: %s, writes %d (the bucket held writes %d)", got.Status, got.Writes, rec2.Writes)
	}
	require.ErrorIs(t, err, store.ErrForeignRecord, "an older copy than the last write must not be put back")
}

// TestDiskOrphanCopyNotPutBack: ada's approval wrote record 2 when an
// answer replaced it and another input put copy 1 back; bob's cancel was
// applied to that (record 2', its copy stored, its replay queued); ada's
// commit then stored its copy 2 and its check failed (she is told
// "already decided" when it comes again). Two different copies with
// writes 2 are in the trail, the orphan stored last. When another answer
// replaces record 2', the later stored of the two was put back: ada's
// approval, which nobody was told was accepted, over bob's applied
// cancel. Now two different copies of the last write put nothing back
// (the run stays stopped). Found by the second review of record copies on
// disk.
func TestDiskOrphanCopyNotPutBack(t *testing.T) {
	t.Parallel()
	s, c, nc := diskStore(t, jetstream.Config{})
	other := store.NewJetStream(c)
	other.UseRecordKey(sealKey, false, false)
	ctx := context.Background()
	suspendedRun(t, s)
	decide := func(s *store.JetStream, by string) *subjects.Run {
		rec, err := store.Update(ctx, s, "r1", func(r *subjects.Run) (*subjects.Run, error) {
			if r == nil {
				return nil, nil // a guess: read, and asked again
			}
			next := *r
			next.Status, next.Error, next.UpdatedAt = subjects.RunResuming, "decided by "+by, time.Now()
			return &next, nil
		})
		require.NoError(t, err)
		return rec
	}
	accepted := func(rec *subjects.Run, by string) store.Effects {
		return store.Effects{Record: rec, Events: []store.Event{{Event: subjects.Event{Version: subjects.Version,
			Type: subjects.EventDecisionAccepted, RunID: "r1", Agent: "refunds", At: time.Now(),
			Verdict: &subjects.Verdict{Approver: by, Outcome: subjects.OutcomeAccepted}}, Dedup: "by-" + by}}}
	}
	ada := decide(s, "ada")
	replaceRecord(t, c, nc, "r1")
	bob := decide(other, "bob")
	require.Equal(t, uint64(2), bob.Writes, "bob's cancel applied to copy 1, put back")
	require.NoError(t, other.Commit(ctx, accepted(bob, "bob")))
	require.Error(t, s.Commit(ctx, accepted(ada, "ada")), "ada's check fails: her copy is an orphan")

	replaceRecord(t, c, nc, "r1")
	got, _, err := other.Run(ctx, "r1")
	if err == nil {
		t.Logf("put back: %s (writes %d)", got.Error, got.Writes)
	}
	require.ErrorIs(t, err, store.ErrForeignRecord, "one of two different copies of the last write was put back")
}

// TestFloodOfAnswersMakesInputsWait: while answers keep landing on a
// record's key, an input that meets one puts the copy back and may find
// another answer there straight after: it waits and comes again
// (ErrContended), where it was refused for good (ErrForeignRecord: a
// decision rejected, an outcome or a timer dead-lettered). Once the flood
// stops, inputs apply. Found by the second review of record copies on
// disk.
func TestFloodOfAnswersMakesInputsWait(t *testing.T) {
	t.Parallel()
	s, c, nc := diskStore(t, jetstream.Config{})
	ctx := context.Background()
	suspendedRun(t, s)
	input := func() error {
		next, err := store.Update(ctx, s, "r1", func(r *subjects.Run) (*subjects.Run, error) {
			if r == nil {
				return nil, nil
			}
			next := *r
			return &next, nil
		})
		if err != nil {
			return err
		}
		return s.Commit(ctx, store.Effects{Record: next, Events: []store.Event{{Event: subjects.Event{
			Version: subjects.Version, Type: subjects.EventReminded, RunID: "r1", Agent: "refunds", At: time.Now()},
			Dedup: fmt.Sprintf("w%d", next.Writes)}}})
	}

	stop, done := make(chan struct{}), make(chan struct{})
	go func() { // the attacker: answers back to back, each flushed
		defer close(done)
		subject := "$KV." + c.BucketName(jetstream.RunsBucket) + ".r1"
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = nc.Publish(subject, []byte(`{"type":"io.nats.jetstream.api.v1.consumer_info_response"}`))
			_ = nc.Flush()
		}
	}()
	waited := 0
	for range 300 {
		err := input()
		require.NotErrorIs(t, err, store.ErrForeignRecord, "an input refused for good during a flood")
		if err != nil {
			waited++
		}
	}
	close(stop)
	<-done
	t.Logf("%d of 300 inputs waited for the flood", waited)
	require.Positive(t, waited, "the flood met no input")
	require.Eventually(t, func() bool { return input() == nil }, 10*time.Second, 10*time.Millisecond,
		"an input applies once the flood stops")
}

// suspendedRun writes run r1's first record, suspended, through s, and
// commits the suspension with the record's copy.
func suspendedRun(t *testing.T, s *store.JetStream) *subjects.Run {
	t.Helper()
	ctx := context.Background()
	rec, err := store.Update(ctx, s, "r1", func(*subjects.Run) (*subjects.Run, error) {
		return &subjects.Run{Version: subjects.Version, RunID: "r1", Agent: "refunds", Status: subjects.RunSuspended}, nil
	})
	require.NoError(t, err)
	require.NoError(t, s.Commit(ctx, transition("r1", rec.Writes, "suspended")))
	return rec
}
