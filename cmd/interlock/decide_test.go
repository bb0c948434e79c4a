package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// shellWords splits command as a POSIX shell does when it is pasted.
func shellWords(t *testing.T, command string) []string {
	t.Helper()
	out, err := exec.Command("/bin/sh", "-c", "set -- "+command+`; printf '%s\0' "$@"`).Output()
	require.NoError(t, err, command)
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

// The commands a personal notification carries work when pasted; without
// --approver the refusal says to pass it.
func TestNotificationCommandsWorkWhenPasted(t *testing.T) {
	t.Parallel()
	got := make(chan []byte, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	defer hook.Close()
	cfg := filepath.Join(t.TempDir(), "notifier.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`
gateway_url: https://gw.example.test
sinks:
  ada: {type: webhook, url: `+hook.URL+`, personal: ada}
routes:
  - {match: 'true', sinks: [ada]}
`), 0o600))
	srv := serve(t, t.TempDir(), "--notifier-config", cfg)
	url, stop := srv.URL, srv.Stop
	ctx := context.Background()
	require.Equal(t, 0, cli(t, "provision", "--nats-url", url, "--agent", "pay").code)
	conn, err := jetstream.Dial(ctx, jetstream.DialConfig{URL: url}, jetstream.Config{})
	require.NoError(t, err)
	defer conn.Close()
	w := processor.NewWorker(conn, processor.WorkerConfig{})
	require.NoError(t, w.Register("pay", func(ctx context.Context, _ json.RawMessage) (any, error) {
		d, err := processor.Interrupt(ctx, processor.Request{Message: "Pay 7 USD?", Approvers: []string{"ada"},
			ResponseSchema: map[string]any{"type": "object", "required": []string{"amount", "currency"}, "properties": map[string]any{
				"amount": map[string]any{"type": "number"}, "currency": map[string]any{"type": "string", "enum": []string{"EUR", "USD"}}}},
			Metadata: map[string]any{"arguments": map[string]any{"amount": 7, "currency": "USD", "memo": "it's 'quoted'"}}})
		if err != nil {
			return nil, err
		}
		return d.Payload, nil
	}))
	require.NoError(t, w.Start(ctx))
	defer func() { _ = w.Stop(context.Background()) }()
	api := processor.NewClient(conn)
	run, err := api.Start(ctx, "pay", nil)
	require.NoError(t, err)
	var note struct {
		Decide []struct {
			ApproveCommand string `json:"approveCommand"`
		} `json:"decide"`
	}
	select {
	case b := <-got:
		require.NoError(t, json.Unmarshal(b, &note))
	case <-time.After(15 * time.Second):
		t.Fatal("no notification")
	}
	require.Len(t, note.Decide, 1)
	args := shellWords(t, note.Decide[0].ApproveCommand)
	require.Equal(t, "interlock", args[0])
	args = append(args[1:], "--nats-url", url)

	i := slices.Index(args, "--approver")
	require.Positive(t, i, "a personal notification decides as its person: %v", args)
	anonymous := slices.Delete(slices.Clone(args), i, i+2)
	r := cli(t, anonymous...)
	assert.Equal(t, exitRejected, r.code, r.out+r.err)
	assert.Contains(t, r.err, "pass --approver", "the refusal says which flag to pass")
	r = cli(t, append(slices.Clone(anonymous), "--approver", "bob")...)
	assert.Equal(t, exitRejected, r.code, r.out+r.err)
	assert.Contains(t, r.err, "bob may not decide")
	assert.Contains(t, r.err, "--approver ada")

	r = cli(t, args...)
	require.Equal(t, 0, r.code, r.out+r.err)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	rec, err := api.Wait(wctx, run, processor.Finished)
	require.NoError(t, err)
	assert.Equal(t, subjects.RunCompleted, rec.Status)
	assert.JSONEq(t, `{"amount":7,"currency":"USD"}`, string(rec.Result), "the tool's arguments, typed")
	require.NoError(t, w.Stop(context.Background()))
	assert.Equal(t, 0, stop())
}
