package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/chat/slack/slacktest"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/subjects"
)

// The gateway user of the shipped NATS configuration posts the cards the
// notifier user asks for (interlock.chat.post), records them in its own
// bucket, and follows them from the consumer `interlock provision` made (gateway_slack):
// it binds to it, pulls, acks once chat.update succeeded, and dead-letters
// an event whose update Slack refuses for good. Two gateways share the
// consumer: each message is updated once.
func TestSlackFollowerShippedPermissions(t *testing.T) {
	t.Parallel()
	jstest.SetPasswords(t)
	srv, err := embedded.Start(embedded.Config{ConfigFile: "../../deploy/nats/single.conf", DataDir: t.TempDir(),
		Port: -1, Sync: embedded.SyncInterval})
	require.NoError(t, err)
	defer srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func(user string) *jetstream.Client {
		c, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: jstest.As(user, srv.URL()), InboxPrefix: subjects.InboxPrefix(user)},
			jetstream.Config{})
		require.NoError(t, err, user)
		t.Cleanup(c.Close)
		return c
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	admin := dial("admin")
	require.NoError(t, admin.Provision(ctx))
	require.NoError(t, coordinator.Provision(ctx, admin, coordinator.Config{}))
	require.NoError(t, gateway.Provision(ctx, admin))
	co := coordinator.New(dial("coordinator"), coordinator.Config{Logger: quiet})
	require.NoError(t, co.Start(ctx))
	defer func() { _ = co.Stop(context.Background()) }()

	fake := slacktest.New(t, "xoxb-test")
	dir, err := approvers.Parse("test", []byte("identities:\n  ada: {slack: {team: T0TEAM, user: U0ADA}}\n"))
	require.NoError(t, err)
	cfg := gateway.Config{Directory: dir, Logger: quiet, Slack: &gateway.SlackConfig{SigningSecret: []byte("slack-signing-secret-0123"),
		TeamID: "T0TEAM", BotToken: "xoxb-test", Channels: map[string]string{"finance-slack": "C0CHAN"}, APIURL: fake.APIURL(), ResponseURLPrefix: fake.URL + "/respond/"}}
	for range 2 {
		gw, err := gateway.New(ctx, dial("gateway"), cfg)
		require.NoError(t, err, "the gateway user binds to gateway_slack")
		defer gw.Close()
	}

	agent := dial("agent")
	notifier := dial("notifier")
	// ask suspends run and has a gateway post its card, asked by the
	// notifier user.
	ask := func(run string) {
		in := subjects.Interrupt{ID: "ask", Reason: "confirmation", Message: "refund?", Approvers: []string{"ada"}}
		s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: run, Agent: "refunds"}, Interrupts: []subjects.Interrupt{in}}
		data, _ := json.Marshal(s)
		subject, _ := agent.Namespace().Suspended("refunds", run)
		_, err := agent.Publish(ctx, subject, data, run+":0", nil)
		require.NoError(t, err)
		_, err = processor.NewClient(admin).Wait(ctx, run, processor.Suspended)
		require.NoError(t, err)
		req, _ := json.Marshal(subjects.ChatPostRequest{Version: 1, RunID: run, InterruptID: "ask", Sink: "finance-slack",
			Kind: subjects.ChatNew, Key: run})
		data, err = notifier.Request(ctx, notifier.Namespace().ChatPost(), req)
		require.NoError(t, err)
		var reply subjects.ChatPostReply
		require.NoError(t, json.Unmarshal(data, &reply))
		require.Empty(t, reply.Code, reply.Detail)
	}
	decide := func(run string) {
		v, err := processor.NewClient(dial("ada")).Decide(ctx, processor.DecisionRequest{RunID: run, InterruptID: "ask",
			Status: subjects.StatusResolved, Approver: "ada"})
		require.NoError(t, err)
		require.Equal(t, subjects.OutcomeAccepted, v.Outcome)
	}
	acked := func() bool {
		st, err := admin.ConsumerState(ctx, jetstream.StreamEvents, gateway.SlackDurable)
		return err == nil && st.Pending == 0 && st.AckPending == 0 && st.Delivered > 0
	}

	// Slack refuses the update for good: dead-lettered, not retried.
	ask("run-gone")
	fake.Fail("chat.update", "message_not_found")
	decide("run-gone")
	dlq, err := admin.Namespace().DeadLetter(gateway.SlackDurable)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := admin.SubjectCount(ctx, jetstream.StreamDLQ, dlq)
		return err == nil && n == 1
	}, 15*time.Second, 10*time.Millisecond, "dead-lettered by the gateway user")
	require.Eventually(t, acked, 15*time.Second, 10*time.Millisecond)

	ask("run-1")
	decide("run-1")
	require.Eventually(t, func() bool { return fake.Messages()[1].Updates > 0 }, 15*time.Second, 10*time.Millisecond)
	require.Eventually(t, acked, 15*time.Second, 10*time.Millisecond, "acked after chat.update")
	assert.Equal(t, 1, fake.Messages()[1].Updates, "one of the two gateways updated it")
	assert.Len(t, fake.Calls("chat.update"), 2, "the refused update and this one, nothing else")

	// Nothing more: the gateway user creates, changes and deletes no
	// consumer, pulls from no other, dead-letters under no other name.
	// Each of these is answered at once where allowed (no_wait); refused,
	// it gets no answer.
	nc, err := nats.Connect(jstest.As("gateway", srv.URL()), nats.CustomInboxPrefix(subjects.InboxPrefix("gateway")))
	require.NoError(t, err)
	defer nc.Close()
	for _, subject := range []string{
		"$JS.API.CONSUMER.CREATE.INTERLOCK_EVENTS.gateway_slack",
		"$JS.API.CONSUMER.CREATE.INTERLOCK_EVENTS.gateway_slack.interlock.events.>",
		"$JS.API.CONSUMER.DURABLE.CREATE.INTERLOCK_EVENTS.gateway_slack",
		"$JS.API.CONSUMER.DELETE.INTERLOCK_EVENTS.gateway_slack",
		"$JS.API.CONSUMER.MSG.NEXT.INTERLOCK_RUNS.coordinator_runs",
		"interlock.dlq.worker_refunds",
	} {
		_, err := nc.Request(subject, []byte(`{"batch": 1, "no_wait": true}`), 500*time.Millisecond)
		assert.Error(t, err, subject)
	}
}
