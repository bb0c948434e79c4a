package mcpbridge

import (
	"context"
	"time"

	"github.com/interlockhq/interlock/jetstream"
)

// CallsBucket names the bucket where the proxy records, before it calls
// the upstream after an approval, that the call is being made.
const CallsBucket = "mcp_calls"

// callsTTL is how long a call's record is kept: far longer than any pass
// can be retried.
const callsTTL = 30 * 24 * time.Hour

// Provision creates what the MCP servers need beyond the core streams (the
// proxy's calls bucket, whose keys are written once, and its task key),
// through a client that provisions (and may purge the bucket's stream):
// `interlock provision` calls it.
func Provision(ctx context.Context, c *jetstream.Client) error {
	calls, err := c.OnceBucket(ctx, CallsBucket, "Interlock MCP proxy: upstream calls being made after an approval", callsTTL)
	if err != nil {
		return err
	}
	return provisionTaskKey(ctx, calls)
}
