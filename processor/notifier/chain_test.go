package notifier

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/subjects"
)

// escalatingAgent runs a coordinator and a worker whose agent "refunds"
// asks ada a question with a 4s deadline, a reminder 1s before it, and one
// escalation to boss that adds 3s: a run of it sees a new suspension, a
// reminder, an escalation, a reminder for the new deadline and an expiry.
// A reminder already past when its timer is armed is skipped, so each
// leaves the coordinator seconds to arm it (3s after the suspension, 2s
// after the escalation), even on a machine busy with parallel tests.
func (e *env) escalatingAgent() {
	e.t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	co := coordinator.New(e.admin, coordinator.Config{Logger: quiet})
	require.NoError(e.t, co.Start(ctx(e.t)))
	e.t.Cleanup(func() { _ = co.Stop(context.Background()) })
	w := processor.NewWorker(e.admin, processor.WorkerConfig{Logger: quiet})
	require.NoError(e.t, w.Register("refunds", func(ctx context.Context, _ json.RawMessage) (any, error) {
		_, err := processor.Interrupt(ctx, processor.Request{Message: "Refund?", Timeout: 4 * time.Second,
			Approvers: []string{"ada"}, ResponseSchema: json.RawMessage(`{"type":"object"}`),
			Metadata: map[string]any{"team": "finance"}, RemindBefore: []time.Duration{time.Second},
			OnExpiry: processor.Expiry{Action: subjects.ExpiryEscalate, Approvers: []string{"boss"}, Extend: 3 * time.Second}})
		return nil, err
	}))
	require.NoError(e.t, w.Start(ctx(e.t)))
	e.t.Cleanup(func() { _ = w.Stop(context.Background()) })
}

// A reminder and an escalation chain, end to end: a real coordinator and
// worker, a notifier, a webhook receiver. Notification services tell new,
// reminder, escalated and expired apart by kind.
func TestReminderAndEscalationChain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.escalatingAgent()

	team, managers := newReceiver(t, nil), newReceiver(t, nil)
	e.start(fmt.Sprintf(`
sinks:
  team: {type: webhook, url: %s}
  managers: {type: webhook, url: %s}
routes:
  - {name: escalations, match: 'kind == "escalated"', sinks: [managers]}
  - {name: all, match: 'true', sinks: [team]}
`, team.URL, managers.URL), nil)

	run, err := processor.NewClient(e.admin).Start(ctx(t), "refunds", nil)
	require.NoError(t, err)
	rec, err := processor.NewClient(e.admin).Wait(ctx(t), run, processor.Suspended)
	require.NoError(t, err, "%+v", rec)
	// new, reminder, escalated, reminder (for the new deadline), expired.
	require.Eventually(t, func() bool { return len(team.got()) >= 5 }, 30*time.Second, 20*time.Millisecond)
	got := team.got()
	var kinds []Kind
	keys := map[string]bool{}
	for _, r := range got {
		var b WebhookBody
		require.NoError(t, json.Unmarshal(r.body, &b))
		assert.Equal(t, run, b.Suspension.RunID)
		kinds = append(kinds, b.Kind)
		keys[b.Key] = true
		if b.Kind == KindExpired {
			assert.Contains(t, b.Text, "Nobody decided in time")
			assert.NotContains(t, b.Text, "approve:")
		}
		if b.Kind == KindEscalated {
			assert.Contains(t, b.Decide[0].Approvers, "boss")
		}
	}
	assert.Equal(t, []Kind{KindNew, KindReminder, KindEscalated, KindReminder, KindExpired}, kinds)
	assert.Len(t, keys, 5, "each notice has its own idempotency key")
	m := managers.waitN(t, 1)
	var b WebhookBody
	require.NoError(t, json.Unmarshal(m[0].body, &b))
	assert.Equal(t, KindEscalated, b.Kind)
	assert.Contains(t, b.Subject, "escalated:")
}
