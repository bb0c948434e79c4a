package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// A run whose worker went away sits in resuming: `interlock runs` marks it
// stuck, the metrics and /readyz say no worker consumes the agent's work,
// and all of it clears once a worker starts.
func TestRunsShowsStuckWork(t *testing.T) {
	t.Parallel()
	srv := serve(t, t.TempDir(), "--metrics-addr", "127.0.0.1:0")
	url, stop := srv.URL, srv.Stop
	metrics := srv.addr("metrics and health")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Equal(t, 0, cli(t, "provision", "--nats-url", url, "--agent", "tally").code)
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()
	agent := func(ctx context.Context, _ json.RawMessage) (any, error) {
		d, err := processor.Interrupt(ctx, processor.Request{Message: "go on?"})
		if err != nil {
			return nil, err
		}
		return d.Payload, nil
	}
	w := processor.NewWorker(conn, processor.WorkerConfig{})
	require.NoError(t, w.Register("tally", agent))
	require.NoError(t, w.Start(ctx))
	api := processor.NewClient(conn)
	run, err := api.Start(ctx, "tally", nil)
	require.NoError(t, err)
	_, err = api.Wait(ctx, run, processor.Suspended)
	require.NoError(t, err)

	r := cli(t, "runs", "--nats-url", url, "--status", "suspended")
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, run)
	assert.Contains(t, r.out, "suspended")

	// The worker goes away; the decision is accepted and the run waits for
	// a replay nobody runs.
	require.NoError(t, w.Stop(context.Background()))
	_, err = api.Decide(ctx, processor.DecisionRequest{RunID: run, InterruptID: pendingID(t, api, run), Status: subjects.StatusResolved,
		Payload: 1})
	require.NoError(t, err)
	get := func(path string) string {
		resp, err := http.Get("http://" + metrics + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	require.Eventually(t, func() bool {
		return strings.Contains(get("/metrics"), `interlock_work_unserved{agent="tally"} 1`)
	}, 20*time.Second, 50*time.Millisecond, "the metric names the agent nobody serves")
	assert.Contains(t, get("/metrics"), `interlock_work_waiting{agent="tally"} 1`)
	assert.Contains(t, get("/readyz"), "unserved: agent tally has 1 work items waiting and no worker consuming them")

	r = cli(t, "runs", "--nats-url", url, "--status", "resuming", "--agent", "tally")
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, "no worker consumes agent tally's work")
	assert.Contains(t, r.out, "start a worker for tally")
	r = cli(t, "runs", "--nats-url", url, "--status", "resuming", "--json")
	require.Equal(t, 0, r.code, r.err)
	var out runsOut
	require.NoError(t, json.Unmarshal([]byte(r.out), &out))
	require.Len(t, out.Runs, 1)
	assert.Equal(t, run, out.Runs[0].RunID)
	assert.NotEmpty(t, out.Runs[0].Stuck)
	assert.Equal(t, []processor.AgentWork{{Agent: "tally", Waiting: 1, Served: false}}, out.Work)

	r = cli(t, "runs", "--nats-url", url, "--status", "completed")
	assert.Equal(t, exitNotFound, r.code, "no run matches")
	r = cli(t, "runs", "--nats-url", url, "--status", "resuming", "--older-than", "1h")
	assert.Equal(t, exitNotFound, r.code)
	r = cli(t, "runs", "--nats-url", url, "--status", "stuck")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.err, "suspended, resuming, completed, failed")

	// A worker starts: the run completes and nothing is unserved.
	w2 := processor.NewWorker(conn, processor.WorkerConfig{})
	require.NoError(t, w2.Register("tally", agent))
	require.NoError(t, w2.Start(ctx))
	defer func() { _ = w2.Stop(context.Background()) }()
	_, err = api.Wait(ctx, run, processor.Finished)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !strings.Contains(get("/metrics"), "interlock_work_unserved") },
		10*time.Second, 50*time.Millisecond)
	assert.NotContains(t, get("/readyz"), "unserved")
	r = cli(t, "runs", "--nats-url", url, "--status", "completed", "--json")
	require.Equal(t, 0, r.code, r.err)
	require.NoError(t, w2.Stop(context.Background()))
	assert.Equal(t, 0, stop())
}

func pendingID(t *testing.T, api *processor.Client, run string) string {
	rec, err := api.Run(context.Background(), run)
	require.NoError(t, err)
	require.Len(t, rec.Pending(), 1)
	return rec.Pending()[0].ID
}

// Attack: the answer to a question that asks for a credential is read back
// with `interlock show`. It shows that the answer was given, never what.
func TestShowWithholdsSensitiveAnswers(t *testing.T) {
	t.Parallel()
	srv := serve(t, t.TempDir())
	url, stop := srv.URL, srv.Stop
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
