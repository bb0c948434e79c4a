package processor

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// TestBadTrafficLoad cycles runs while a share of the decisions are
// duplicates, conflicting, late, for unknown runs, malformed or
// unauthorized, and counts: runs completed, decisions accepted, rejected by
// reason, lost (must be 0) and applied twice (must be 0). The default size
// is small; INTERLOCK_SOAK=1 runs 2,000 runs.
func TestBadTrafficLoad(t *testing.T) {
	t.Parallel()
	runs := 100
	if os.Getenv("INTERLOCK_SOAK") != "" {
		runs = 2000
	}
	h := newBareHarness(t, map[string]AgentFunc{"gate": func(ctx context.Context, _ json.RawMessage) (any, error) {
		d, err := Interrupt(ctx, Request{Approvers: []string{"ada"}, ResponseSchema: map[string]any{"type": "integer"}})
		if err != nil {
			return nil, err
		}
		return d.Payload, nil
	}})
	h.startCoordinator(nil)
	h.startCoordinator(nil)
	h.startWorker(nil)
	h.startWorker(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := h.admin.Namespace()
	// check fails the test from a run's goroutine and ends the others'
	// waits at once, rather than at the deadline.
	check := func(err error) bool {
		if err != nil {
			t.Error(err)
			cancel()
		}
		return err == nil
	}
	raw := func(subject string, body []byte) {
		_, err := h.admin.Publish(ctx, subject, body, "", nil)
		check(err)
	}
	var sent sync.Map // kind -> *atomic.Int64
	count := func(kind string) {
		v, _ := sent.LoadOrStore(kind, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			run := fmt.Sprintf("bad-%05d", i)
			_, err := h.client.Start(ctx, "gate", nil, WithRunID(run))
			if !check(err) {
				return
			}
			rec, err := h.client.Wait(ctx, run, Suspended)
			if !check(err) {
				return
			}
			id := rec.Pending()[0].ID
			good := DecisionRequest{RunID: run, InterruptID: id, Status: subjects.StatusResolved, Payload: i,
				Approver: "ada", DecisionID: "good-" + run}
			// Bad traffic first, at random.
			switch rand.IntN(6) {
			case 0:
				_, _ = h.client.Decide(ctx, DecisionRequest{RunID: run, InterruptID: id, Status: subjects.StatusResolved,
					Payload: i, Approver: "mallory"})
				count("unauthorized")
			case 1:
				_, _ = h.client.Decide(ctx, DecisionRequest{RunID: run, InterruptID: id, Status: subjects.StatusResolved,
					Payload: "not an integer", Approver: "ada"})
				count("schema")
			case 2:
				_, _ = h.client.Decide(ctx, DecisionRequest{RunID: "ghost-" + strconv.Itoa(i), InterruptID: id,
					Status: subjects.StatusResolved, Approver: "ada"})
				count("unknown run")
			case 3:
				subject, _ := ns.ResumeAs(run, "ada")
				raw(subject, []byte(`{"version":1,"decisionId":`))
				count("malformed")
			}
			v, err := h.client.Decide(ctx, good)
			if !check(err) {
				return
			}
			if v.Outcome != subjects.OutcomeAccepted {
				check(fmt.Errorf("run %s: good decision %+v", run, v))
				return
			}
			count("good")
			// After it: a duplicate (another message id), a conflicting one, a late one.
			data, _ := json.Marshal(subjects.Decision{Version: 1, DecisionID: good.DecisionID, InterruptID: id,
				Status: subjects.StatusResolved, Payload: json.RawMessage(strconv.Itoa(i)), Approver: "ada"})
			subject, _ := ns.ResumeAs(run, "ada")
			_, err = h.admin.Publish(ctx, subject, data, "resend-"+run, nil)
			if !check(err) {
				return
			}
			count("duplicate")
			_, _ = h.client.Decide(ctx, DecisionRequest{RunID: run, InterruptID: id, Status: subjects.StatusCancelled, Approver: "ada"})
			count("conflicting")
		}(i)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	completed, applied := 0, 0
	for i := range runs {
		run := fmt.Sprintf("bad-%05d", i)
		rec, err := h.client.Wait(ctx, run, Finished)
		require.NoError(t, err)
		if rec.Status == subjects.RunCompleted && string(rec.Result) == strconv.Itoa(i) {
			completed++
		}
		for _, in := range rec.Interrupts {
			if in.Decision != nil {
				applied++
			}
		}
	}
	// Count what the coordinator answered, by reason.
	msgs, err := h.admin.Messages(ctx, jetstream.StreamEvents, ns.All(subjects.KindEvents), 0, 100*runs)
	require.NoError(t, err)
	accepted := map[string]int{}
	byCode := map[subjects.Code]int{}
	dups := 0
	for _, m := range msgs {
		var ev subjects.Event
		require.NoError(t, json.Unmarshal(m.Data, &ev))
		switch ev.Type {
		case subjects.EventDecisionAccepted:
			accepted[ev.RunID]++
		case subjects.EventDecisionRejected:
			byCode[ev.Code]++
		case subjects.EventDecisionDuplicate:
			dups++
		}
	}
	lost, twice := runs-completed, 0
	for _, n := range accepted {
		if n > 1 {
			twice++
		}
	}
	assert.Zero(t, lost, "runs lost")
	assert.Zero(t, twice, "decisions applied twice")
	assert.Equal(t, runs, applied, "one decision per run")
	assert.Len(t, accepted, runs)
	figures := fmt.Sprintf("%d runs in %s: completed %d, decisions accepted %d, duplicates answered %d, rejected %v; lost %d, applied twice %d",
		runs, time.Since(start).Round(time.Millisecond), completed, len(accepted), dups, byCode, lost, twice)
	sent.Range(func(k, v any) bool { figures += fmt.Sprintf("; sent %s %d", k, v.(*atomic.Int64).Load()); return true })
	t.Log(figures)
}
