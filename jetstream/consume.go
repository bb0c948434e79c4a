package jetstream

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Msg is a message delivered by a consumer loop.
type Msg struct {
	Subject string
	Data    []byte
	Header  Header
	// Stream and Sequence locate the message in its stream.
	Stream   string
	Sequence uint64
	// Deliveries counts this delivery: 1 the first time.
	Deliveries uint64
	Time       time.Time
}

// Handler handles one message. A nil error acks it; any other error retries
// it later (see RetryAfter and DeadLetter for the other outcomes).
type Handler func(ctx context.Context, m *Msg) error

type retryError struct {
	after time.Duration
	err   error
}

func (e *retryError) Error() string { return fmt.Sprintf("retry after %s: %v", e.after, e.err) }
func (e *retryError) Unwrap() error { return e.err }

// RetryAfter makes a handler's message come back after d, whatever the
// consumer's backoff says.
func RetryAfter(d time.Duration, err error) error { return &retryError{after: d, err: err} }

type deadLetterError struct{ err error }

func (e *deadLetterError) Error() string { return e.err.Error() }
func (e *deadLetterError) Unwrap() error { return e.err }

// DeadLetter makes a handler's message go to the dead-letter stream now, with
// err as the reason: for input no retry can fix.
func DeadLetter(err error) error { return &deadLetterError{err: err} }

// ConsumerConfig is what one durable consumer loop is.
type ConsumerConfig struct {
	Stream  Stream
	Durable string
	// FilterSubjects narrows the stream; empty means every subject.
	FilterSubjects []string
	// AckWait is how long the server waits for an ack before redelivering;
	// default 30s. Handlers that run longer are kept alive with InProgress.
	AckWait time.Duration
	// MaxDeliver bounds deliveries; default 10. The last failed attempt
	// dead-letters the message.
	MaxDeliver int
	// BackOff is the delay before each retry after a handler error, indexed
	// by delivery; the last value repeats. Default 100ms, 1s, 5s, 30s.
	BackOff []time.Duration
	// MaxAckPending bounds unacked messages in flight; default 1024.
	MaxAckPending int
	// Concurrency is the number of handler goroutines; default 1.
	Concurrency int
	// PartitionKey, when set, sends messages with the same key to the same
	// goroutine, so they are handled one at a time in stream order.
	PartitionKey func(m *Msg) string
	// DeliverNew makes a consumer created now start with messages published
	// from now on instead of the whole stream. It only matters at creation:
	// an existing consumer keeps its position.
	DeliverNew bool
	// OnDeadLetter, when set, is called after a message was dead-lettered.
	OnDeadLetter func(m *Msg, reason error)
	// Logger receives retries and dead letters; default slog.Default().
	Logger *slog.Logger
}

func (cc ConsumerConfig) withDefaults() ConsumerConfig {
	if cc.AckWait == 0 {
		cc.AckWait = 30 * time.Second
	}
	if cc.MaxDeliver == 0 {
		cc.MaxDeliver = 10
	}
	if len(cc.BackOff) == 0 {
		cc.BackOff = []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second, 30 * time.Second}
	}
	if cc.MaxAckPending == 0 {
		cc.MaxAckPending = 1024
	}
	if cc.Concurrency <= 0 {
		cc.Concurrency = 1
	}
	if cc.Logger == nil {
		cc.Logger = slog.Default()
	}
	return cc
}

// jetstreamConfig is the server-side consumer of cc.
func (cc ConsumerConfig) jetstreamConfig() jetstream.ConsumerConfig {
	jcc := jetstream.ConsumerConfig{
		Durable:        cc.Durable,
		FilterSubjects: cc.FilterSubjects,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        cc.AckWait,
		MaxDeliver:     cc.MaxDeliver,
		MaxAckPending:  cc.MaxAckPending,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if cc.DeliverNew {
		jcc.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	return jcc
}

// Consumer is a running consumer loop.
type Consumer struct {
	cc     ConsumerConfig
	client *Client
	cctx   jetstream.ConsumeContext
	queues []chan jetstream.Msg
	wg     sync.WaitGroup
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
}

// Consume creates or updates the durable consumer and runs h on its messages
// until Stop.
func (c *Client) Consume(ctx context.Context, cc ConsumerConfig, h Handler) (*Consumer, error) {
	cc = cc.withDefaults()
	cons, err := c.consumer(ctx, c.StreamName(cc.Stream), cc.jetstreamConfig())
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", cc.Durable, cc.Stream, err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	k := &Consumer{cc: cc, client: c, ctx: lctx, cancel: cancel}
	k.queues = make([]chan jetstream.Msg, cc.Concurrency)
	for i := range k.queues {
		q := make(chan jetstream.Msg, 64)
		k.queues[i] = q
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			for m := range q {
				k.handle(h, m)
			}
		}()
	}
	batch := min(cc.MaxAckPending, 256)
	k.cctx, err = cons.Consume(k.dispatch, jetstream.PullMaxMessages(batch),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, jetstream.ErrConsumerDeleted) {
				cc.Logger.Debug("consume", "consumer", cc.Durable, "error", err)
			}
		}))
	if err != nil {
		k.stopQueues()
		return nil, fmt.Errorf("consume %s: %w", cc.Durable, translate(err))
	}
	return k, nil
}

// consumer returns the durable consumer want on stream. A client that has
// provisioned creates it or updates it, keeping an existing consumer's
// starting point; any other binds to the consumer as it exists, changing
// nothing, and fails with ErrNotProvisioned when it is missing or reads
// other subjects.
func (c *Client) consumer(ctx context.Context, stream string, want jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	existing, err := c.js.Consumer(ctx, stream, want.Durable)
	switch {
	case err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, translate(err)
	case !c.Provisioner() && err != nil:
		return nil, fmt.Errorf("%w: consumer %s on stream %s does not exist", ErrNotProvisioned, want.Durable, stream)
	case !c.Provisioner():
		if have := existing.CachedInfo().Config; !sameFilter(have, want) {
			return nil, fmt.Errorf("%w: consumer %s reads %v, this process needs %v", ErrNotProvisioned,
				want.Durable, filters(have), filters(want))
		}
		return existing, nil
	case err == nil:
		// Keep where it starts and how many copies it has.
		have := existing.CachedInfo().Config
		want.DeliverPolicy = have.DeliverPolicy
		want.Replicas = max(want.Replicas, have.Replicas)
	}
	cons, err := c.js.CreateOrUpdateConsumer(ctx, stream, want)
	return cons, translate(err)
}

func filters(cc jetstream.ConsumerConfig) []string {
	if cc.FilterSubject != "" {
		return append([]string{cc.FilterSubject}, cc.FilterSubjects...)
	}
	return cc.FilterSubjects
}

func sameFilter(a, b jetstream.ConsumerConfig) bool {
	fa, fb := slices.Sorted(slices.Values(filters(a))), slices.Sorted(slices.Values(filters(b)))
	return slices.Equal(fa, fb)
}

// CreateConsumer creates the durable consumer cc describes, or updates it,
// without consuming: for `interlock provision`, so that processes without
// the right to create consumers find theirs. The client must have
// provisioned.
func (c *Client) CreateConsumer(ctx context.Context, cc ConsumerConfig) error {
	if !c.Provisioner() {
		return fmt.Errorf("%w: consumer %s: this client has not provisioned", ErrNotProvisioned, cc.Durable)
	}
	cc = cc.withDefaults()
	jcc := cc.jetstreamConfig()
	if _, err := c.consumer(ctx, c.StreamName(cc.Stream), jcc); err != nil {
		return fmt.Errorf("consumer %s on %s: %w", cc.Durable, cc.Stream, err)
	}
	return nil
}

func (k *Consumer) dispatch(m jetstream.Msg) {
	i := 0
	if k.cc.PartitionKey != nil && len(k.queues) > 1 {
		h := fnv.New32a()
		_, _ = h.Write([]byte(k.cc.PartitionKey(&Msg{Subject: m.Subject(), Data: m.Data(), Header: Header(m.Headers())})))
		i = int(h.Sum32() % uint32(len(k.queues)))
	} else if len(k.queues) > 1 {
		// Any free goroutine: pick the shortest queue.
		for j := range k.queues {
			if len(k.queues[j]) < len(k.queues[i]) {
				i = j
			}
		}
	}
	select {
	case k.queues[i] <- m:
	case <-k.ctx.Done():
		_ = m.Nak()
	}
}

func (k *Consumer) handle(h Handler, raw jetstream.Msg) {
	if k.ctx.Err() != nil {
		_ = raw.Nak()
		return
	}
	meta, err := raw.Metadata()
	if err != nil {
		_ = raw.Term()
		return
	}
	m := &Msg{
		Subject: raw.Subject(), Data: raw.Data(), Header: Header(raw.Headers()),
		Stream: meta.Stream, Sequence: meta.Sequence.Stream, Deliveries: meta.NumDelivered, Time: meta.Timestamp,
	}
	// Keep a long handler's message from being redelivered under it.
	alive := keepAlive(raw, k.cc.AckWait/2)
	err = runHandler(context.WithoutCancel(k.ctx), h, m)
	alive()

	var retry *retryError
	var dead *deadLetterError
	switch {
	case err == nil:
		_ = raw.Ack()
	case errors.As(err, &dead):
		k.deadLetter(raw, m, err)
	case int(m.Deliveries) >= k.cc.MaxDeliver:
		k.deadLetter(raw, m, fmt.Errorf("gave up after %d deliveries: %w", m.Deliveries, err))
	case errors.As(err, &retry):
		_ = raw.NakWithDelay(retry.after)
	default:
		i := min(int(m.Deliveries)-1, len(k.cc.BackOff)-1)
		k.cc.Logger.Warn("handler failed; will retry", "consumer", k.cc.Durable, "subject", m.Subject,
			"seq", m.Sequence, "delivery", m.Deliveries, "retry_in", k.cc.BackOff[i], "error", err)
		_ = raw.NakWithDelay(k.cc.BackOff[i])
	}
}

// keepAlive sends InProgress for raw every interval until the returned stop
// is called.
func keepAlive(raw jetstream.Msg, interval time.Duration) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(interval, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped && raw.InProgress() == nil {
			t.Reset(interval)
		}
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

func runHandler(ctx context.Context, h Handler, m *Msg) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return h(ctx, m)
}

// deadLetter copies the message with its reason to the dead-letter stream,
// then terminates it. If the copy fails the message is retried instead, so a
// dead letter is never lost.
func (k *Consumer) deadLetter(raw jetstream.Msg, m *Msg, reason error) {
	subject, err := k.client.ns.DeadLetter(k.cc.Durable)
	if err == nil {
		h := Header{}
		for key, v := range m.Header {
			if key != HeaderMsgID {
				h[key] = v
			}
		}
		h[HeaderDLQReason] = []string{reason.Error()}
		h[HeaderDLQSubject] = []string{m.Subject}
		h[HeaderDLQStream] = []string{m.Stream}
		h[HeaderDLQSequence] = []string{strconv.FormatUint(m.Sequence, 10)}
		h[HeaderDLQDeliveries] = []string{strconv.FormatUint(m.Deliveries, 10)}
		h[HeaderDLQConsumer] = []string{k.cc.Durable}
		ctx, cancel := context.WithTimeout(context.Background(), k.client.cfg.Timeout)
		_, err = k.client.Publish(ctx, subject, m.Data, fmt.Sprintf("dlq-%s-%d", m.Stream, m.Sequence), h)
		cancel()
	}
	if err != nil {
		k.cc.Logger.Error("dead-letter failed; will retry", "consumer", k.cc.Durable, "seq", m.Sequence, "error", err)
		_ = raw.NakWithDelay(k.cc.BackOff[len(k.cc.BackOff)-1])
		return
	}
	k.cc.Logger.Warn("dead-lettered", "consumer", k.cc.Durable, "subject", m.Subject, "seq", m.Sequence, "reason", reason)
	if k.cc.OnDeadLetter != nil {
		k.cc.OnDeadLetter(m, reason)
	}
	_ = raw.TermWithReason(truncate(reason.Error(), 200))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// Stop stops fetching, lets the handlers finish the messages they hold, and
// returns when they have. Messages fetched but not started are nak'ed so
// another process takes them at once.
func (k *Consumer) Stop() {
	k.once.Do(func() {
		k.cancel()
		k.cctx.Stop()
		<-k.cctx.Closed()
		k.stopQueues()
	})
}

func (k *Consumer) stopQueues() {
	for _, q := range k.queues {
		close(q)
	}
	k.wg.Wait()
}

// Consumers is a set of consumer loops started together and stopped
// together. The zero value is ready to use.
type Consumers struct {
	mu   sync.Mutex
	list []*Consumer
}

// Add keeps c to be stopped with the others.
func (s *Consumers) Add(c *Consumer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, c)
}

// Stop stops every consumer added, letting each finish the messages under
// way.
func (s *Consumers) Stop() {
	s.mu.Lock()
	list := s.list
	s.list = nil
	s.mu.Unlock()
	for _, c := range list {
		c.Stop()
	}
}
