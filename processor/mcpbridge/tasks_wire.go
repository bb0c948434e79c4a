package mcpbridge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Transport returns inner with the task layer under the SDK: the task
// messages are answered on the connection, everything else reaches the
// SDK's server (stdio: `srv.Run(ctx, tasks.Transport(&mcp.StdioTransport{}))`).
func (t *Tasks) Transport(inner mcp.Transport) mcp.Transport {
	return &taskTransport{inner: inner, t: t}
}

type taskTransport struct {
	inner mcp.Transport
	t     *Tasks
}

func (tt *taskTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := tt.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &taskConn{Connection: c, t: tt.t, ctx: cctx, cancel: cancel, pending: map[jsonrpc.ID]string{}}, nil
}

// taskConn answers the requests Tasks claims and patches the SDK's answers
// to initialize and tools/list.
type taskConn struct {
	mcp.Connection
	t      *Tasks
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	pending map[jsonrpc.ID]string
	// ready is set once the SDK answered initialize: the task layer
	// answers a 2025-11-25 client only after.
	ready atomic.Bool
}

func (c *taskConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		m, err := c.Connection.Read(ctx)
		if err != nil {
			return m, err
		}
		req, ok := m.(*jsonrpc.Request)
		if !ok {
			return m, nil
		}
		if c.t.claims(req) {
			if !c.ready.Load() && !modernRequest(req) {
				if err := c.Connection.Write(ctx, c.t.notInitialized(req)); err != nil {
					return nil, err
				}
				continue
			}
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				_ = c.Connection.Write(c.ctx, c.t.handle(c.ctx, req))
			}()
			continue
		}
		if req.IsCall() && patched(req.Method) {
			c.mu.Lock()
			c.pending[req.ID] = req.Method
			c.mu.Unlock()
		}
		return m, nil
	}
}

func (c *taskConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if resp, ok := m.(*jsonrpc.Response); ok && resp.Error == nil {
		c.mu.Lock()
		method, found := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if found {
			if method == "initialize" {
				c.ready.Store(true)
			}
			cp := *resp
			cp.Result = c.t.patch(method, resp.Result)
			m = &cp
		}
	}
	return c.Connection.Write(ctx, m)
}

func (c *taskConn) Close() error {
	c.cancel()
	err := c.Connection.Close()
	c.wg.Wait()
	return err
}

// maxBody bounds a request body the HTTP layer reads (the SDK's default).
const maxBody = mcp.DefaultMaxRequestBodyBytes

// HTTP returns next (the SDK's streamable HTTP handler) with the task layer
// in front: a POSTed request Tasks claims is answered here as JSON, the
// SDK's answers to initialize and tools/list are patched, and everything
// else reaches next unchanged. Put it inside the guard (mcphttp.Guard), so
// that the token and Origin checks come first.
func (t *Tasks) HTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The SDK's DNS-rebinding check, for the requests answered here
		// that the SDK never sees: on a loopback listener, the Host must
		// be loopback too.
		if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil &&
			loopback(la.String()) && !loopback(r.Host) {
			t.log.Warn("MCP request refused: a loopback server asked for another host", "host", r.Host)
			http.Error(w, fmt.Sprintf("Forbidden: invalid Host header %q", r.Host), http.StatusForbidden)
			return
		}
		if r.Method == http.MethodDelete {
			// The client ends its session: its waiting calls return now,
			// else the SDK's DELETE waits for them.
			t.endSession(r)
		}
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		_ = r.Body.Close()
		if err != nil {
			http.Error(w, "read the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if int64(len(body)) > maxBody {
			http.Error(w, fmt.Sprintf("the request is over %d bytes", maxBody), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		msg, err := jsonrpc.DecodeMessage(body)
		if err != nil {
			next.ServeHTTP(w, r)
			return
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		if t.claims(req) {
			if !t.initialized(req, r.Header.Get("Mcp-Session-Id")) {
				raw, _ := jsonrpc.EncodeMessage(t.notInitialized(req))
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(raw)
				return
			}
			// As the SDK asks of every POST.
			if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				http.Error(w, "Content-Type must be application/json", http.StatusUnsupportedMediaType)
				return
			}
			raw, err := jsonrpc.EncodeMessage(t.handle(r.Context(), req))
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			if sid := r.Header.Get("Mcp-Session-Id"); sid != "" {
				w.Header().Set("Mcp-Session-Id", sid)
			}
			_, _ = w.Write(raw)
			return
		}
		if !req.IsCall() || !patched(req.Method) {
			next.ServeHTTP(w, r)
			return
		}
		rec := &recorder{header: http.Header{}}
		next.ServeHTTP(rec, r)
		out := rec.buf.Bytes()
		if rec.code == 0 || rec.code == http.StatusOK {
			out = t.patchHTTP(req, rec.header.Get("Content-Type"), out)
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		if rec.code != 0 {
			w.WriteHeader(rec.code)
		}
		_, _ = w.Write(out)
	})
}

// loopback reports whether hostport (a host with or without a port) names
// the loopback interface.
func loopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// patchHTTP patches the answer to req in an HTTP response body: a JSON
// body, or the data lines of an event stream.
func (t *Tasks) patchHTTP(req *jsonrpc.Request, ctype string, body []byte) []byte {
	fix := func(data []byte) []byte {
		m, err := jsonrpc.DecodeMessage(data)
		if err != nil {
			return data
		}
		resp, ok := m.(*jsonrpc.Response)
		if !ok || resp.ID != req.ID || resp.Error != nil {
			return data
		}
		resp.Result = t.patch(req.Method, resp.Result)
		raw, err := jsonrpc.EncodeMessage(resp)
		if err != nil {
			return data
		}
		return raw
	}
	if strings.HasPrefix(ctype, "application/json") {
		return fix(body)
	}
	if !strings.HasPrefix(ctype, "text/event-stream") {
		return body
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), int(maxBody)*2)
	for sc.Scan() {
		line := sc.Bytes()
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok && json.Valid(data) {
			out.WriteString("data: ")
			out.Write(fix(data))
		} else {
			out.Write(line)
		}
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// recorder keeps a whole response (initialize and tools/list are short).
type recorder struct {
	header http.Header
	code   int
	buf    bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.buf.Write(b) }
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Flush() {}
