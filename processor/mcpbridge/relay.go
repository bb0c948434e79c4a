package mcpbridge

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Relay forwards an upstream's notifications to the proxy's clients:
// progress of a forwarded call to the client that made it (under the
// client's own progress token), log messages to every client at the level
// it set, list_changed for tools, resources and prompts to every client,
// and resources/updated to the clients subscribed to the resource. A log
// message names no request, so it cannot be sent only to the client whose
// call it is about: every client sees it (docs/mcp.md).
//
// The upstream session must be connected with ClientOptions, and the Relay
// given to NewProxy (ProxyConfig.Relay), which attaches the proxy's server.
type Relay struct {
	n atomic.Int64

	mu       sync.Mutex
	srv      *mcp.Server
	changed  func() // the proxy forgets its cached tool definitions
	progress map[string]progressTarget
}

// progressTarget is a client's call in flight upstream: its session and
// the progress token it chose.
type progressTarget struct {
	// ctx is the client's request's: over streamable HTTP, a notification
	// sent with it goes on the request's own stream.
	ctx   context.Context
	ss    *mcp.ServerSession
	token any
}

// NewRelay returns a Relay attached to no server yet.
func NewRelay() *Relay { return &Relay{progress: map[string]progressTarget{}} }

// The placeholders the relay adds and removes on the proxy's server to make
// the SDK send a list_changed notification to every client (the SDK sends
// one only when the server's own lists change). The proxy answers the
// lists and calls from the upstream, so clients never see them. Remove
// when the SDK can send a list_changed notification on its own.
const (
	placeholderTool     = "interlock-relay-list-changed"
	placeholderPrompt   = "interlock-relay-list-changed"
	placeholderResource = "interlock-relay:list-changed"
)

// ClientOptions are the options to connect the upstream session with.
func (r *Relay) ClientOptions() *mcp.ClientOptions {
	return &mcp.ClientOptions{
		ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
			key := fmt.Sprint(req.Params.ProgressToken)
			r.mu.Lock()
			tg, ok := r.progress[key]
			r.mu.Unlock()
			if !ok {
				return
			}
			p := *req.Params
			p.ProgressToken = tg.token
			_ = tg.ss.NotifyProgress(tg.ctx, &p)
		},
		LoggingMessageHandler: func(ctx context.Context, req *mcp.LoggingMessageRequest) {
			srv := r.server()
			if srv == nil {
				return
			}
			for ss := range srv.Sessions() {
				_ = ss.Log(ctx, req.Params)
			}
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			r.mu.Lock()
			srv, changed := r.srv, r.changed
			r.mu.Unlock()
			if changed != nil {
				changed()
			}
			if srv != nil {
				srv.AddTool(&mcp.Tool{Name: placeholderTool, InputSchema: map[string]any{"type": "object"}},
					func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return nil, nil })
				srv.RemoveTools(placeholderTool)
			}
		},
		PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) {
			if srv := r.server(); srv != nil {
				srv.AddPrompt(&mcp.Prompt{Name: placeholderPrompt},
					func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) { return nil, nil })
				srv.RemovePrompts(placeholderPrompt)
			}
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			if srv := r.server(); srv != nil {
				srv.AddResource(&mcp.Resource{URI: placeholderResource, Name: placeholderResource},
					func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) { return nil, nil })
				srv.RemoveResources(placeholderResource)
			}
		},
		ResourceUpdatedHandler: func(ctx context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			if srv := r.server(); srv != nil {
				_ = srv.ResourceUpdated(ctx, req.Params)
			}
		},
	}
}

func (r *Relay) server() *mcp.Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.srv
}

func (r *Relay) attach(srv *mcp.Server, changed func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.srv, r.changed = srv, changed
}

// track registers a forwarded call's progress token: it returns the token
// to send upstream (unique to this call, so two clients' tokens never
// mix) and what to call once the call returned.
func (r *Relay) track(tg progressTarget) (string, func()) {
	key := fmt.Sprintf("interlock-%d", r.n.Add(1))
	r.mu.Lock()
	r.progress[key] = tg
	r.mu.Unlock()
	return key, func() {
		r.mu.Lock()
		delete(r.progress, key)
		r.mu.Unlock()
	}
}
