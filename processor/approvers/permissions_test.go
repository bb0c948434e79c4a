package approvers_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/subjects"
)

// TestNATSPermissions starts a server from deploy/nats/auth.conf and shows
// that identity on the NATS path cannot be forged: an agent cannot publish a
// decision, approver ada cannot publish as bob, and ada's own decision is
// accepted with her identity.
func TestNATSPermissions(t *testing.T) {
	t.Parallel()
	jstest.SetPasswords(t)
	srv, err := embedded.Start(embedded.Config{ConfigFile: "../../deploy/nats/single.conf", DataDir: t.TempDir(),
		Port: -1, Sync: embedded.SyncInterval})
	require.NoError(t, err)
	defer srv.Shutdown()
	url := func(user string) string { return jstest.As(user, srv.URL()) }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(user string) *jetstream.Client {
		c, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url(user), InboxPrefix: subjects.InboxPrefix(user)}, jetstream.Config{})
		require.NoError(t, err, user)
		t.Cleanup(c.Close)
		return c
	}
	admin := dial("admin")
	require.NoError(t, admin.Provision(ctx))
	require.NoError(t, gateway.Provision(ctx, admin)) // as `interlock provision` does
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.NoError(t, coordinator.Provision(ctx, admin, coordinator.Config{}))
	// serve as the coordinator user binds to what admin provisioned.
	co := coordinator.New(dial("coordinator"), coordinator.Config{Logger: quiet})
	require.NoError(t, co.Start(ctx))
	defer co.Stop(context.Background())

	// A worker (the agent user) suspends a run that only ada may decide.
	agent := dial("agent")
	s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "run-1", Agent: "refunds"},
		Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", Approvers: []string{"ada"}}}}
	data, _ := json.Marshal(s)
	subject, _ := agent.Namespace().Suspended("refunds", "run-1")
	_, err = agent.Publish(ctx, subject, data, "run-1:0", nil)
	require.NoError(t, err)
	_, err = processor.NewClient(admin).Wait(ctx, "run-1", processor.Suspended)
	require.NoError(t, err)

	// A worker stores the AG-UI events a body emits; the gateway reads them
	// and keeps its threads bucket (the AG-UI bridge).
	aguiSubject, _ := agent.Namespace().AGUI("refunds", "run-1")
	_, err = agent.Publish(ctx, aguiSubject, []byte(`{"type":"CUSTOM"}`), "run-1:emit:0", nil)
	require.NoError(t, err)
	gw := dial("gateway")
	kept, err := gw.Messages(ctx, jetstream.StreamAGUI, aguiSubject, 0, 10)
	require.NoError(t, err)
	assert.Len(t, kept, 1)
	threads, err := gw.Bucket(ctx, "threads", "Interlock AG-UI threads", 0)
	require.NoError(t, err)
	require.NoError(t, threads.Put(ctx, "t", []byte("{}")))

	violations := func(user string) (*nats.Conn, func() []error) {
		var mu sync.Mutex
		var errs []error
		nc, err := nats.Connect(url(user), nats.CustomInboxPrefix(subjects.InboxPrefix(user)), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc, func() []error { mu.Lock(); defer mu.Unlock(); return append([]error(nil), errs...) }
	}
	decision := []byte(`{"version":1,"decisionId":"d","interruptId":"ask","status":"resolved"}`)
	for _, c := range []struct{ user, subject string }{
		{"agent", "interlock.resume.run-1"},
		{"agent", "interlock.resume.run-1.ada"},
		{"ada", "interlock.resume.run-1.bob"},
		{"ada", "interlock.resume.run-1"},
	} {
		nc, errs := violations(c.user)
		require.NoError(t, nc.Publish(c.subject, decision))
		require.NoError(t, nc.Flush())
		require.Eventually(t, func() bool {
			for _, e := range errs() {
				if errors.Is(e, nats.ErrPermissionViolation) {
					return true
				}
			}
			return false
		}, 5*time.Second, 10*time.Millisecond, "%s publishing on %s", c.user, c.subject)
	}
	n, err := admin.MsgCount(ctx, jetstream.StreamDecisions)
	require.NoError(t, err)
	assert.Zero(t, n, "no refused decision reached the stream")

	// Ada, as herself.
	v, err := processor.NewClient(dial("ada")).Decide(ctx, processor.DecisionRequest{RunID: "run-1", InterruptID: "ask",
		Status: subjects.StatusResolved, Approver: "ada"})
	require.NoError(t, err)
	assert.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	rec, err := processor.NewClient(admin).Run(ctx, "run-1")
	require.NoError(t, err)
	assert.Equal(t, "ada", rec.Interrupts[0].Decision.Approver)
}
