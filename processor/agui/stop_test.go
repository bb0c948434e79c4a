package agui_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/agui"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/coordinator"
)

// stopEnv is a bridge on its own HTTP server, with a coordinator and a
// worker whose agent "slow" runs until release is closed.
type stopEnv struct {
	bridge  *agui.Bridge
	url     string
	started chan struct{}
	release chan struct{}
}

func newStopEnv(t *testing.T) *stopEnv {
	t.Helper()
	srv := jstest.Server(t)
	nc := jstest.Client(t, srv)
	require.NoError(t, agui.Provision(context.Background(), nc))
	e := &stopEnv{started: make(chan struct{}, 1), release: make(chan struct{})}
	co := coordinator.New(jstest.Client(t, srv), coordinator.Config{Logger: quiet})
	require.NoError(t, co.Start(context.Background()))
	t.Cleanup(func() { _ = co.Stop(context.Background()) })
	w := processor.NewWorker(jstest.Client(t, srv), processor.WorkerConfig{Logger: quiet})
	require.NoError(t, w.Register("slow", func(ctx context.Context, _ json.RawMessage) (any, error) {
		e.started <- struct{}{}
		select {
		case <-e.release:
			return "done", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	var err error
	e.bridge, err = agui.New(context.Background(), nc, agui.Config{Logger: quiet,
		Identity: func(*http.Request) approvers.Identity { return approvers.Identity{Name: "ada", Agents: []string{"*"}} }})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /agui/{agent}", e.bridge)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	t.Cleanup(func() {
		select {
		case <-e.release:
		default:
			close(e.release)
		}
	})
	e.url = hs.URL + "/agui/slow"
	return e
}

// post starts a request on a thread of its own and returns its response.
func (e *stopEnv) post(t *testing.T, thread string) *http.Response {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"threadId": thread, "runId": "c1",
		"messages": []any{map[string]any{"id": "u1", "role": "user", "content": "go"}}})
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(e.url, "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	return resp
}

// events reads the event stream of resp to its end, on a goroutine: the
// types of the events, once it has ended.
func events(t *testing.T, resp *http.Response) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		defer resp.Body.Close()
		var types []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var ev map[string]any
				if json.Unmarshal([]byte(line), &ev) == nil {
					s, _ := ev["type"].(string)
					if m, ok := ev["message"].(string); ok {
						s += " " + m
					}
					types = append(types, s)
				}
			}
		}
		out <- types
	}()
	return out
}

func stopped(b *agui.Bridge) bool {
	select {
	case <-b.Stopped():
		return true
	default:
		return false
	}
}

// TestBridgeStopWaitsForTheRequests: Stop refuses new requests and waits
// for the one under way while its context lasts; the request ends as it
// would have, and Stopped closes once Stop has returned.
func TestBridgeStopWaitsForTheRequests(t *testing.T) {
	t.Parallel()
	e := newStopEnv(t)
	stream := events(t, e.post(t, "t1"))
	<-e.started
	stopErr := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { stopErr <- e.bridge.Stop(ctx) }()
	require.Eventually(t, func() bool {
		resp := e.post(t, "t2")
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	}, 10*time.Second, 10*time.Millisecond, "a stopping bridge refuses new requests")
	assert.False(t, stopped(e.bridge), "Stopped closed while a request is under way")
	select {
	case err := <-stopErr:
		t.Fatalf("Stop returned while a request is under way: %v", err)
	default:
	}
	close(e.release)
	require.NoError(t, <-stopErr)
	assert.True(t, stopped(e.bridge))
	got := <-stream
	require.NotEmpty(t, got)
	assert.Equal(t, "RUN_FINISHED", got[len(got)-1], "the request ended as it would have: %v", got)
}

// TestBridgeStopCancelsAtTheDeadline: a request still under way when
// Stop's context ends is cancelled (RUN_ERROR saying the gateway stops;
// the run goes on), Stop returns an error wrapping the context's, and
// Stopped closes.
func TestBridgeStopCancelsAtTheDeadline(t *testing.T) {
	t.Parallel()
	e := newStopEnv(t)
	stream := events(t, e.post(t, "t1"))
	<-e.started
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, e.bridge.Stop(ctx), context.DeadlineExceeded)
	assert.True(t, stopped(e.bridge))
	got := <-stream
	require.NotEmpty(t, got)
	assert.True(t, strings.HasPrefix(got[len(got)-1], "RUN_ERROR this gateway is stopping"), "%v", got)
	require.NoError(t, e.bridge.Stop(context.Background()), "Stop again is harmless")
}
