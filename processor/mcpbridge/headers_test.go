package mcpbridge

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream/jstest"
)

// An upgrade: over the task key an older proxy wrote, an answer whose
// visible headers were a message id and, after a bare LF (which nats.go
// read as a line end and nats-server does not), "Nats-TTL: never", the
// server's own hidden after a blank line: Provision took it for a key it
// had kept for good, and every proxy then MACed task ids and named call
// records with a key of the attacker's choosing.
func TestTaskKeyWithHiddenHeadersReplaced(t *testing.T) {
	t.Parallel()
	srv, admin, nc := olderCallsBucket(t)
	require.NoError(t, admin.Provision(t.Context()))
	known := strings.Repeat("0f", 32)
	hdr := "NATS/1.0\r\nNats-Msg-Id: planted-key\nNats-TTL: never\r\nNats-Stream: X\r\nNats-Subject: x\r\nNats-Sequence: 999\r\n" +
		"Nats-Time-Stamp: 2026-01-01T00:00:00Z\r\n\r\n\r\n"
	jstest.AnswerRaw(t, nc, srv.URL(), "INTERLOCK_AGUI", "interlock.agui.mcp.key", hdr, []byte(known),
		"KV_interlock_mcp_calls", "$KV.interlock_mcp_calls."+taskKeyName)

	key := provisionedTaskKey(t, srv, admin)
	assert.NotEqual(t, known, hex.EncodeToString(key), "the proxy MACs task ids with a key of the attacker's choosing")
}
