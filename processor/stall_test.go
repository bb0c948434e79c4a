package processor

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/subjects"
)

// stallProxy forwards TCP to target and can hold every byte back, as a
// network that stalls without closing the connection would.
type stallProxy struct {
	l       net.Listener
	target  string
	stalled atomic.Bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallProxy{l: l, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *stallProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for p.stalled.Load() {
			time.Sleep(5 * time.Millisecond) // the stall itself
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

func (p *stallProxy) url() string { return "nats://" + p.l.Addr().String() }

func (p *stallProxy) close() {
	p.stalled.Store(false)
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestNetworkStallLongerThanAckWait: a worker's network stalls in the
// middle of a replay for longer than AckWait. The replay is redelivered to
// another worker; when the stall ends, the first one's outcome is a
// duplicate. The run completes once, with one replay scheduled and one
// completion recorded.
func TestNetworkStallLongerThanAckWait(t *testing.T) {
	t.Parallel()
	h := newBareHarness(t, nil)
	h.startCoordinator(nil)
	var bodies atomic.Int32
	inReplay := make(chan struct{}, 4)
	agent := func(ctx context.Context, _ json.RawMessage) (any, error) {
		d, err := Interrupt(ctx, Request{Message: "go?"})
		if err != nil {
			return nil, err
		}
		bodies.Add(1)
		inReplay <- struct{}{}
		time.Sleep(300 * time.Millisecond) // the replay's work
		return d.Payload, nil
	}
	proxy := newStallProxy(t, h.srv.URL()[len("nats://"):])
	stalling := jstest.ClientURL(t, proxy.url())
	first := NewWorker(stalling, WorkerConfig{AckWait: time.Second, Logger: quiet})
	require.NoError(t, first.Register("a", agent))
	require.NoError(t, first.Start(context.Background()))
	t.Cleanup(func() { stopWorker(t, first) })

	run := h.start("a", nil)
	rec := h.suspendedAtPass(run, 0)
	h.decide(run, rec.Pending()[0].ID, subjects.StatusResolved, "ok")
	<-inReplay
	proxy.stalled.Store(true) // the first worker is cut off mid-replay
	// A second worker on a healthy connection takes the redelivered replay.
	second := NewWorker(h.conn(), WorkerConfig{AckWait: time.Second, Logger: quiet})
	require.NoError(t, second.Register("a", agent))
	require.NoError(t, second.Start(context.Background()))
	t.Cleanup(func() { stopWorker(t, second) })
	rec = h.waitFor(run, Finished)
	proxy.stalled.Store(false) // the stall ends; the first worker's outcome arrives late
	assert.Equal(t, subjects.RunCompleted, rec.Status)
	require.Eventually(t, func() bool {
		n, err := h.admin.MsgCount(h.ctx(), jetstream.StreamWork)
		return err == nil && n == 0
	}, 15*time.Second, 20*time.Millisecond, "every work item acked")
	assert.Len(t, h.replays(run), 1, "one replay scheduled")
	assert.Len(t, h.waitEvents(run, subjects.EventCompleted, 1), 1, "one completion recorded")
	assert.Equal(t, 1, rec.Pass)
	assert.Equal(t, int32(2), bodies.Load(), "the replay ran on the second worker while the first was cut off, and no more")
}
