package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// echo returns its input, after asking a person when the input has "ask".
func echo(ctx context.Context, in json.RawMessage) (any, error) {
	var q struct {
		Ask string `json:"ask"`
	}
	_ = json.Unmarshal(in, &q)
	if q.Ask == "" {
		return in, nil
	}
	d, err := processor.Interrupt(ctx, processor.Request{Message: q.Ask})
	if err != nil {
		return nil, err
	}
	return d.Payload, nil
}

func TestStartCommand(t *testing.T) {
	t.Parallel()
	srv := serve(t, t.TempDir())
	url := srv.URL
	require.Equal(t, 0, cli(t, "provision", "--nats-url", url, "--agent", "echo").code)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()
	w := processor.NewWorker(conn, processor.WorkerConfig{})
	require.NoError(t, w.Register("echo", echo))
	require.NoError(t, w.Start(ctx))
	defer func() { _ = w.Stop(context.Background()) }()
	api := processor.NewClient(conn)
	finished := func(run string) *subjects.Run {
		t.Helper()
		rec, err := api.Wait(ctx, run, processor.Finished)
		require.NoError(t, err)
		require.Equal(t, subjects.RunCompleted, rec.Status, rec.Error)
		return rec
	}
	start := func(args ...string) result {
		t.Helper()
		return cli(t, append(append([]string{"start"}, args...), "--nats-url", url)...)
	}

	// For people, the run id alone: RUN=$(interlock start ...) works.
	r := start("echo", "--input", `{"n": 1}`)
	require.Equal(t, 0, r.code, r.err)
	run := strings.TrimSpace(r.out)
	require.NoError(t, subjects.ValidateToken("run id", run), r.out)
	assert.JSONEq(t, `{"n":1}`, string(finished(run).Result))

	// For machines, JSON; the run id and thread given are the run's.
	r = start("echo", "--input", `[1, 2]`, "--run-id", "r-json", "--thread", "th-1", "--json")
	require.Equal(t, 0, r.code, r.err)
	var out startOut
	require.NoError(t, json.Unmarshal([]byte(r.out), &out), r.out)
	assert.Equal(t, startOut{RunID: "r-json", Agent: "echo", ThreadID: "th-1", Status: "started"}, out)
	rec := finished("r-json")
	assert.Equal(t, "th-1", rec.ThreadID)
	assert.JSONEq(t, `[1,2]`, string(rec.Result))

	// The input from a file, or from standard input.
	file := filepath.Join(t.TempDir(), "input.json")
	require.NoError(t, os.WriteFile(file, []byte(`"from a file"`), 0o600))
	r = start("echo", "--input-file", file)
	require.Equal(t, 0, r.code, r.err)
	assert.JSONEq(t, `"from a file"`, string(finished(strings.TrimSpace(r.out)).Result))
	r = cliIn(t, `{"from": "stdin"}`, "start", "echo", "--input-file", "-", "--nats-url", url)
	require.Equal(t, 0, r.code, r.err)
	assert.JSONEq(t, `{"from":"stdin"}`, string(finished(strings.TrimSpace(r.out)).Result))

	// --wait: until the run ends, and how.
	r = start("echo", "--input", `{"n": 2}`, "--wait")
	require.Equal(t, 0, r.code, r.err)
	assert.Regexp(t, `run \S+ completed: \{"n":2\}`, r.out)

	// --wait: until the run suspends, and what it waits for.
	r = start("echo", "--input", `{"ask": "Ship it?"}`, "--wait")
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, "suspended, waiting for a decision")
	assert.Contains(t, r.out, "Ship it?")
	r = start("echo", "--input", `{"ask": "Ship it now?"}`, "--wait", "--json")
	require.Equal(t, 0, r.code, r.err)
	out = startOut{}
	require.NoError(t, json.Unmarshal([]byte(r.out), &out), r.out)
	assert.Equal(t, string(subjects.RunSuspended), out.Status)
	require.Len(t, out.Waiting, 1)
	assert.Equal(t, "Ship it now?", out.Waiting[0].Message)
	r = cli(t, "approve", out.RunID, out.Waiting[0].ID, "--payload", `"shipped"`, "--nats-url", url)
	require.Equal(t, 0, r.code, r.err)
	assert.JSONEq(t, `"shipped"`, string(finished(out.RunID).Result))

	// A run id in use: the run is started once.
	r = start("echo", "--run-id", "r-json")
	assert.Equal(t, exitRejected, r.code, r.err)
	assert.Contains(t, r.err, "run already exists")

	// Bad input, a bad agent name or run id: a clear error, exit 2, and no
	// run started.
	runs, err := api.Runs(ctx)
	require.NoError(t, err)
	empty := filepath.Join(t.TempDir(), "empty.json")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"echo", "--input", `{"n":`}, "--input is not valid JSON: unexpected end of JSON input"},
		{[]string{"echo", "--input", `{"n": 1}}`}, "--input is not valid JSON: invalid character '}' after top-level value (offset 9)"},
		{[]string{"echo", "--input", `refund`}, "--input is not valid JSON"},
		{[]string{"echo", "--input", ""}, "--input is not valid JSON: unexpected end of JSON input"},
		{[]string{"echo", "--input-file", empty}, "--input-file " + empty + " is not valid JSON"},
		{[]string{"echo", "--input-file", "/no/such.json"}, "--input-file: open /no/such.json"},
		{[]string{"echo", "--input", "1", "--input-file", file}, "[input input-file] were all set"},
		{[]string{"bad.agent"}, `agent "bad.agent" has '.'`},
		{[]string{"refunds*"}, `agent "refunds*" has '*'`},
		{[]string{""}, "agent is empty"},
		{[]string{"echo", "--run-id", "run 7"}, `run id "run 7" has whitespace ' '`},
		{[]string{}, "accepts 1 arg(s), received 0"},
		{[]string{"echo", "extra"}, "accepts 1 arg(s), received 2"},
	} {
		r := start(c.args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", c.args, r.err)
		assert.Contains(t, r.err, c.says, c.args)
		assert.Empty(t, r.out, c.args)
	}
	// A good start after them, waited for: had a bad one been queued, the
	// worker would have taken it too.
	r = start("echo", "--wait")
	require.Equal(t, 0, r.code, r.err)
	after, err := api.Runs(ctx)
	require.NoError(t, err)
	assert.Len(t, after, len(runs)+1, "no run started but the good one")
	_ = w.Stop(context.Background())
	assert.Equal(t, 0, srv.Stop())
}
