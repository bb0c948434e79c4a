package mcpbridge

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/interlockhq/interlock/jetstream"
)

// helper runs role in this process, the way `interlock mcp ...` would, and
// returns the exit code. The NATS server is at env NATS_URL.
func helper(role string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, err := jetstream.Dial(dctx, jetstream.DialConfig{URL: os.Getenv("NATS_URL"), Name: "helper-" + role}, jetstream.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	defer c.Close()
	switch role {
	case "serve":
		s := NewServe(c, Config{Poll: 100 * time.Millisecond, MaxWait: testMaxWait})
		defer s.Close()
		err = s.Server().Run(ctx, &mcp.StdioTransport{})
	default:
		err = fmt.Errorf("unknown helper role %q", role)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}
