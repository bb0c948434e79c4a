package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/internal/mcpgate"
	"github.com/interlockhq/interlock/internal/mcphttp"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/mcpbridge"
	"github.com/interlockhq/interlock/subjects"
)

// mcpFlags are the flags `interlock mcp serve` and `proxy` share.
type mcpFlags struct {
	httpAddr string
	tokenEnv string
	origins  []string
	agent    string
	poll     time.Duration
	stop     time.Duration
}

func (f *mcpFlags) register(cmd *cobra.Command, agent string) {
	fs := cmd.Flags()
	fs.StringVar(&f.httpAddr, "http", "", "serve streamable HTTP on `ADDR` (host:port, loopback unless a token is set) instead of stdio")
	fs.StringVar(&f.tokenEnv, "token-env", "INTERLOCK_MCP_TOKEN",
		"with --http: the environment variable holding the bearer token clients must send (required beyond loopback)")
	fs.StringSliceVar(&f.origins, "allow-origin", nil, "with --http: a browser origin (scheme://host[:port]) allowed to call (repeat); others are refused")
	fs.StringVar(&f.agent, "agent", agent, "the built-in agent's name: its runs, its worker consumer (interlock provision --agent NAME)")
	fs.DurationVar(&f.poll, "poll", 2*time.Second, "how often a waiting call re-reads its run and sends a progress notification")
	stopTimeoutFlag(cmd, &f.stop)
}

func newMCP(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "MCP servers: approval tools for agents, and a gating proxy in front of any MCP server",
		Long: `mcp serve is an MCP server with tools an agent calls to ask for a person's
approval; mcp proxy sits in front of any MCP server and makes the tool calls
a gate expression matches wait for a decision. docs/mcp.md has the setup for
desktop clients and IDEs, the gate syntax and the security model.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newMCPServe(g), newMCPProxy(g))
	return cmd
}

func newMCPServe(g *globals) *cobra.Command {
	var f mcpFlags
	var maxWait time.Duration
	cmd := &cobra.Command{
		Use:   "serve [--http ADDR]",
		Short: "An MCP server with request_approval, check_approval and wait_approval",
		Long: `serve is an MCP server (stdio, or streamable HTTP with --http) for agents that
ask explicitly: request_approval (action, arguments, approvers, deadline,
responseSchema) starts a run of the built-in agent (--agent, default mcp)
that raises one interrupt, and answers with its id once the interrupt is
stored; wait_approval and check_approval return its status, approver, answer
and comment. The process also runs that agent's worker. Decisions, expiry,
the audit trail and notifiers work as for any run. Logs go to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runMCP(cmd, g, f, func(ctx context.Context, c *jetstream.Client, log *slog.Logger) (*mcp.Server, *mcpbridge.Tasks, processor.AgentFunc, func(), error) {
				s := mcpbridge.NewServe(c, mcpbridge.Config{Agent: f.agent, Poll: f.poll, MaxWait: maxWait, Logger: log})
				return s.Server(), s.Tasks(), mcpbridge.ApprovalAgent(), s.Close, nil
			})
		},
	}
	f.register(cmd, mcpbridge.ServeAgent)
	cmd.Flags().DurationVar(&maxWait, "max-wait", 10*time.Minute, "the longest one wait_approval call waits")
	return cmd
}

func newMCPProxy(g *globals) *cobra.Command {
	var (
		f         mcpFlags
		gates     []string
		approvers []string
		upURL     string
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "proxy --gate EXPR [--approver NAME] (--upstream-url URL | -- COMMAND [ARG...])",
		Short: "An MCP server in front of another, where gated tool calls wait for a decision",
		Long: `proxy forwards everything between an MCP client and an upstream MCP server (a
command it spawns and speaks stdio to, after --, or --upstream-url for
streamable HTTP), except the tool calls a --gate expression matches: each
becomes an interrupt (reason tool_call, the arguments shown, the tool's input
schema for edited arguments) of a run of the built-in agent (--agent,
default mcp_proxy), and reaches the upstream only once approved, with the
approved arguments, at most once. Denied or expired, the client gets a tool
result with isError and the reason.

Gate syntax (repeat --gate; a call matching any is gated):
  tool:GLOB  arg:PATH  arg:PATH=VALUE  arg:PATH~GLOB  annotation:HINT  *
  joined with && (all) and ; (any), ! negates; e.g.
  --gate 'tool:delete_*; tool:write_file && !arg:path~/tmp/*; annotation:destructiveHint'
Annotation terms come from the upstream: they may add gating, never remove it.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if (upURL == "") == (len(args) == 0) {
				return usagef("name the upstream: --upstream-url URL, or -- COMMAND [ARG...] (one of them)")
			}
			var gate mcpgate.Gate
			for _, e := range gates {
				p, err := mcpgate.Parse(e)
				if err != nil {
					return usagef("--gate %q: %w", e, err)
				}
				gate = mcpgate.Join(gate, p)
			}
			if gate.Empty() {
				return usagef("--gate: no expression gates anything (use --gate '*' to gate every call)")
			}
			for _, a := range approvers {
				if err := subjects.ValidateToken("approver", a); err != nil {
					return usage(err)
				}
			}
			name, id := upURL, upURL
			if name == "" {
				name, id = args[0], strings.Join(args, "\x00")
			}
			return runMCP(cmd, g, f, func(ctx context.Context, c *jetstream.Client, log *slog.Logger) (*mcp.Server, *mcpbridge.Tasks, processor.AgentFunc, func(), error) {
				relay := mcpbridge.NewRelay()
				up, err := connectUpstream(ctx, upURL, args, relay.ClientOptions())
				if err != nil {
					return nil, nil, nil, nil, err
				}
				p, err := mcpbridge.NewProxy(ctx, c, up, mcpbridge.ProxyConfig{Config: mcpbridge.Config{Agent: f.agent, Poll: f.poll, Logger: log},
					Gate: gate, Approvers: approvers, Timeout: timeout, Upstream: name, UpstreamID: id, Relay: relay})
				if err != nil {
					_ = up.Close()
					return nil, nil, nil, nil, err
				}
				return p.Server(), p.Tasks(), p.Agent(), func() { p.Close(); _ = up.Close() }, nil
			})
		},
	}
	f.register(cmd, mcpbridge.ProxyAgent)
	fs := cmd.Flags()
	fs.StringArrayVar(&gates, "gate", nil, "a gate `EXPR`ession: the calls it matches wait for a decision (repeat)")
	fs.StringSliceVar(&approvers, "approver", nil, "who may decide gated calls (repeat); default: whoever may decide interrupts naming nobody")
	fs.StringVar(&upURL, "upstream-url", "", "the upstream MCP server's streamable HTTP `URL`")
	fs.DurationVar(&timeout, "call-timeout", time.Hour, "how long a gated call waits for a decision before it expires (denied)")
	return cmd
}

// connectUpstream connects to the upstream MCP server: url over streamable
// HTTP, or command spawned and spoken to over stdio; opts handle what the
// upstream sends (the relay to the proxy's clients).
func connectUpstream(ctx context.Context, url string, command []string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	var t mcp.Transport
	if url != "" {
		t = &mcp.StreamableClientTransport{Endpoint: url}
	} else {
		c := exec.Command(command[0], command[1:]...)
		c.Stderr = os.Stderr
		t = &mcp.CommandTransport{Command: c}
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "interlock-mcp-proxy", Version: "1"}, opts)
	cs, err := cl.Connect(ctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("connect to the upstream MCP server: %w", err)
	}
	return cs, nil
}

// runMCP connects to NATS, builds the server and its agent with build,
// runs the agent's worker, and serves MCP on stdio or --http until the
// context ends (or, on stdio, the client goes away).
func runMCP(cmd *cobra.Command, g *globals, f mcpFlags,
	build func(context.Context, *jetstream.Client, *slog.Logger) (*mcp.Server, *mcpbridge.Tasks, processor.AgentFunc, func(), error)) error {
	if err := subjects.ValidateToken("agent", f.agent); err != nil {
		return usage(err)
	}
	if err := checkStopTimeout(f.stop); err != nil {
		return err
	}
	token := ""
	if f.httpAddr != "" {
		token = os.Getenv(f.tokenEnv)
		if err := mcphttp.CheckListen(f.httpAddr, token); err != nil {
			return usagef("--http: %w (the token comes from $%s)", err, f.tokenEnv)
		}
		if err := mcphttp.CheckOrigins(f.origins); err != nil {
			return usagef("--allow-origin: %w", err)
		}
	}
	log, err := g.logger(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	return g.withClient(ctx, g.natsURL, "interlock-mcp", jetstream.Config{}, func(c *jetstream.Client) error {
		srv, tasks, agent, closeSrv, err := build(ctx, c, log)
		if err != nil {
			return err
		}
		defer closeSrv()
		w := processor.NewWorker(c, processor.WorkerConfig{Logger: log})
		if err := w.Register(f.agent, agent); err != nil {
			return usage(err)
		}
		if err := w.Start(ctx); err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = w.Stop(sctx)
		}()
		if f.httpAddr == "" {
			log.Info("MCP on stdio", "agent", f.agent)
			if err := srv.Run(ctx, tasks.Transport(&mcp.StdioTransport{})); err != nil && ctx.Err() == nil {
				return err
			}
			return nil
		}
		l, err := net.Listen("tcp", f.httpAddr)
		if err != nil {
			return usagef("--http %s: %w", f.httpAddr, err)
		}
		h := mcphttp.Guard(tasks.HTTP(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Logger: log})),
			mcphttp.Config{Token: token, Origins: f.origins, Logger: log})
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), f.stop)
			defer cancel()
			_ = hs.Shutdown(sctx)
		}()
		log.Info("MCP over streamable HTTP", "url", "http://"+l.Addr().String(), "agent", f.agent, "token", token != "")
		err = hs.Serve(l)
		// Sessions whose clients never ended them (a client that closes
		// without DELETE) end with the server.
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
}
