package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// Attack: the answer to a question that asks for a credential is read back
// with `interlock show`. It shows that the answer was given, never what.
func TestShowWithholdsSensitiveAnswers(t *testing.T) {
	url, stop := serve(t, t.TempDir(), freePort(t))
	defer func() { assert.Equal(t, 0, stop()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()
	subject, err := conn.Namespace().Suspended("py", "run-pin")
	require.NoError(t, err)
	_, err = conn.Publish(ctx, subject, []byte(`{"version":1,"runId":"run-pin","agent":"py","pass":0,
		"interrupts":[{"id":"pin","reason":"input_required","message":"Your PIN?"}]}`), "run-pin:0", nil)
	require.NoError(t, err)
	api := processor.NewClient(conn)
	_, err = api.Wait(ctx, "run-pin", processor.Suspended)
	require.NoError(t, err)
	v, err := api.Decide(ctx, processor.DecisionRequest{RunID: "run-pin", InterruptID: "pin",
		Status: subjects.StatusResolved, Payload: "pin-8642", Comment: "pin-8642"})
	require.NoError(t, err)
	require.Equal(t, subjects.OutcomeAccepted, v.Outcome)

	for _, args := range [][]string{{"show", "--nats-url", url, "run-pin"}, {"show", "--nats-url", url, "run-pin", "--json"}} {
		r := cli(t, args...)
		require.Equal(t, 0, r.code, r.err)
		assert.NotContains(t, r.out, "pin-8642", args)
		assert.Contains(t, r.out, "resolved", args)
	}
	assert.Contains(t, cli(t, "show", "--nats-url", url, "run-pin").out, "answer withheld")
}
