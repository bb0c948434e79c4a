package attack_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/subjects"
)

// TestAttackPutBackRacesDecisionCommit: between the record write of ada's
// approval and the commit of its effects (held at fault point
// decision-after-record, which does not crash here), the billing agent has
// an API answer stored over run-1's record, and the refunds agent
// publishes a stale outcome of run-1 (any input of the run on another
// consumer would do: an ask, an observation, a timer, another
// coordinator). That input meets the answer and puts back the latest copy
// stored, the suspension's: ada's is not stored yet. With records on disk
// ada's commit then went through (accepted, replay queued) over a record
// saying the interrupt was still open, and a second decision on it was
// accepted too. Now a commit stores its copy first and checks that the
// bucket still holds its write: ada's decision is applied again to what
// was put back, once. Found by the review of the change that put copies
// on disk.
func TestAttackPutBackRacesDecisionCommit(t *testing.T) {
	t.Parallel()
	for name, storage := range map[string]jetstream.Storage{"records on disk": jetstream.FileStorage,
		"records in memory": jetstream.MemoryStorage} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := bareDeployment(t, jetstream.Config{RecordsStorage: storage})
			coCfg := coordinator.Config{Logger: quiet, AckWait: 2 * time.Second}
			require.NoError(t, coordinator.Provision(d.ctx, d.provisioner(), coCfg))
			billingConsumer(t, d)
			billing := d.attacker("agent_billing")
			agent := d.client("agent")
			var held atomic.Bool
			hook := func(point string) bool {
				if point != "decision-after-record" || held.Swap(true) {
					return false
				}
				require.NoError(t, billing.nc.PublishRequest("$JS.API.CONSUMER.INFO.INTERLOCK_WORK.worker_billing",
					"$KV.interlock_runs.run-1", nil))
				require.NoError(t, billing.nc.Flush())
				foreignRecord(t, d, "run-1")
				data, err := json.Marshal(subjects.Completion{PassRef: subjects.PassRef{Version: 1, RunID: "run-1",
					Agent: "refunds", Pass: 7}})
				require.NoError(t, err)
				subject, err := agent.Namespace().Completed("refunds", "run-1")
				require.NoError(t, err)
				_, err = agent.Publish(d.ctx, subject, data, "run-1:stale7", nil)
				require.NoError(t, err)
				auditor := processor.NewClient(d.client("auditor"))
				require.Eventually(t, func() bool {
					_, err := auditor.Run(d.ctx, "run-1")
					return err == nil
				}, 20*time.Second, 20*time.Millisecond, "the other input put a copy back")
				return false // no crash: ada's commit carries on
			}
			co := coordinator.New(d.client("coordinator"), coCfg)
			require.NoError(t, co.Start(fault.With(d.ctx, hook)))
			t.Cleanup(func() { _ = co.Stop(context.Background()) })
			d.suspend(agent, "run-1", "ada")

			ada := processor.NewClient(d.client("ada"))
			v, err := ada.Decide(d.ctx, processor.DecisionRequest{RunID: "run-1", InterruptID: "ask",
				Status: subjects.StatusResolved, Approver: "ada", Via: "cli"})
			require.NoError(t, err)
			require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
			require.True(t, held.Load(), "the race was run")
			rec, err := processor.NewClient(d.client("auditor")).Wait(d.ctx, "run-1", func(r *subjects.Run) bool {
				return r.Status == subjects.RunResuming
			})
			require.NoError(t, err, "the record after ada's accepted approval")
			require.NotNil(t, rec.Interrupts[0].Decision)

			_, err = ada.Decide(d.ctx, processor.DecisionRequest{RunID: "run-1", InterruptID: "ask",
				Status: subjects.StatusCancelled, Approver: "ada", Via: "cli"})
			var rej *processor.RejectionError
			require.ErrorAs(t, err, &rej, "a second decision on the interrupt was accepted")
			require.Equal(t, subjects.CodeAlreadyDecided, rej.Verdict.Code)
		})
	}
}
