package mcpbridge

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/subjects"
)

// An answer stored under a gated call's record key (the run and interrupt,
// which approvers, cards and links show) before the call is approved made
// the approved call read as made by an earlier attempt: reported
// outcome_unknown, never made. Records are kept under a MAC of the task
// key now; an answer under the old key is no record. Found by the fifth
// review of the eighth session.
func TestPlantedCallRecordStopsNoCall(t *testing.T) {
	t.Parallel()
	// Asked for without headers; and with a message id and the server's
	// headers hidden after a blank line in the carrier's header block
	// (nats.go stopped reading there, and the answer passed for a record
	// from before: third_party/nats.go).
	hidden := "NATS/1.0\r\nNats-Msg-Id: planted-legacy\r\nNats-Stream: X\r\nNats-Subject: x\r\nNats-Sequence: 999\r\n" +
		"Nats-Time-Stamp: 2026-01-01T00:00:00Z\r\n\r\n\r\n"
	for _, hdr := range []string{"", hidden} {
		t.Run(fmt.Sprintf("hidden=%v", hdr != ""), func(t *testing.T) {
			t.Parallel()
			w := newProxyWorld(t, "tool:pay", nil)
			cs := w.client(nil)
			done := callAsync(w.ctx, cs, "pay", map[string]any{"amount": 40, "to": "acme"})
			p := w.pending()
			nc, key := natsConn(t, w.world), "$KV.interlock_mcp_calls."+p.RunID+"."+p.ID
			if hdr == "" {
				jstest.Answer(t, nc, "INTERLOCK_AGUI", "interlock.agui.mcp.planted", nil, []byte(`{}`), "KV_interlock_mcp_calls", key, true)
			} else {
				jstest.AnswerRaw(t, nc, w.srv.URL(), "INTERLOCK_AGUI", "interlock.agui.mcp.planted", hdr, []byte(`{}`),
					"KV_interlock_mcp_calls", key)
			}

			w.decide(p.RunID, p.ID, "ada", subjects.StatusResolved, map[string]any{}, "")
			res := await(t, done, "the call's result")
			require.False(t, res.IsError, "an answer under the call's old key stopped the approved call: %s", text(res))
			assert.Equal(t, []upcall{{"pay", map[string]any{"amount": 40.0, "to": "acme"}}}, w.up.got())
		})
	}
}

// The task key, which MACs task ids and names call records, was read back
// from the calls bucket whatever its key held: an answer of 64 hex digits
// stored there before a proxy started (or over a key written by an older
// proxy, which wrote it again at each start with no message id) was taken
// for it, so whoever stored it could compute another client's task ids.
// Provision now keeps it for good in a bucket whose keys are written once,
// and replaces what it finds there that it did not keep.
func TestTaskKeyKeptForGood(t *testing.T) {
	t.Parallel()
	srv, admin, nc := olderCallsBucket(t)
	ctx := t.Context()
	js, err := njs.New(nc)
	require.NoError(t, err)
	kv, err := js.KeyValue(ctx, admin.BucketName(CallsBucket))
	require.NoError(t, err)
	_, err = kv.Put(ctx, taskKeyName, []byte(strings.Repeat("ab", 32)))
	require.NoError(t, err)
	known := strings.Repeat("0f", 32)
	require.NoError(t, admin.Provision(ctx)) // the stream the carrier goes to
	jstest.Answer(t, nc, "INTERLOCK_AGUI", "interlock.agui.mcp.key", nil, []byte(known), "KV_interlock_mcp_calls",
		"$KV.interlock_mcp_calls."+taskKeyName, true)

	key := provisionedTaskKey(t, srv, admin)
	assert.NotEqual(t, known, hex.EncodeToString(key), "the proxy MACs task ids with a key of the attacker's choosing")
	assert.NotEqual(t, strings.Repeat("ab", 32), hex.EncodeToString(key), "a key from before is replaced")
	assert.Len(t, key, 32)

	// Kept for good: nothing more is stored under the key, an answer or a
	// client's write, and Provision again keeps it.
	_, err = js.Publish(ctx, "$KV.interlock_mcp_calls."+taskKeyName, []byte(known), njs.WithMsgID("second"))
	require.Error(t, err, "a second write of the key is refused")
	require.NoError(t, nc.PublishRequest("$JS.API.DIRECT.GET.INTERLOCK_AGUI.interlock.agui.mcp.key",
		"$KV.interlock_mcp_calls."+taskKeyName, []byte(`{"no_hdr":true}`)))
	// An answer stored after the one above tells that one was handled.
	jstest.Answer(t, nc, "INTERLOCK_AGUI", "interlock.agui.mcp.after", nil, []byte(`{}`), "KV_interlock_mcp_calls",
		"$KV.interlock_mcp_calls.after", true)
	assert.Equal(t, key, provisionedTaskKey(t, srv, admin))

	// A proxy started before Provision kept a key is told to run it.
	fresh := jstest.Client(t, jstest.Server(t))
	b, err := fresh.Bucket(ctx, CallsBucket, "older", callsTTL)
	require.NoError(t, err)
	_, err = TaskKey(ctx, b)
	require.ErrorIs(t, err, jetstream.ErrNotFound)
	assert.Contains(t, err.Error(), "interlock provision")
}

// natsConn is a plain NATS connection to w's server, as any user's.
func natsConn(t *testing.T, w *world) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(w.srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// olderCallsBucket is a server with the calls bucket as an older Interlock
// left it (written any number of times, the key stored with a plain put),
// admin's client, and a plain connection to the server.
func olderCallsBucket(t *testing.T) (*embedded.Server, *jetstream.Client, *nats.Conn) {
	t.Helper()
	srv := jstest.Server(t)
	admin := jstest.Client(t, srv)
	_, err := admin.Bucket(t.Context(), CallsBucket, "older", callsTTL)
	require.NoError(t, err)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return srv, admin, nc
}

// provisionedTaskKey provisions the calls bucket as admin and returns the
// task key a proxy then reads.
func provisionedTaskKey(t *testing.T, srv *embedded.Server, admin *jetstream.Client) []byte {
	t.Helper()
	require.NoError(t, Provision(t.Context(), admin))
	calls, err := jstest.Client(t, srv).OpenBucket(t.Context(), CallsBucket)
	require.NoError(t, err)
	key, err := TaskKey(t.Context(), calls)
	require.NoError(t, err)
	return key
}
