package jetstream

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/interlockhq/interlock/internal/lifecycle"
	"github.com/interlockhq/interlock/internal/textcut"
	"github.com/interlockhq/interlock/subjects"
)

// Delivery is a message delivered by a consumer loop.
type Delivery struct {
	Subject string
	Data    []byte
	Header  Header
	// Stream and Sequence locate the message in its stream.
	Stream   string
	Sequence uint64
	// Deliveries counts this delivery: 1 the first time.
	Deliveries uint64
	Time       time.Time
	// ackWait is the loop's reading of its consumer's ack wait.
	ackWait *atomic.Int64
}

// AckWait is the consumer's ack wait as the loop last read it (it reads it
// again every ConfigRead): once the handler's context has ended, the
// server hands the message to another process this long after the loop's
// last renewal. DefaultAckWait for a Delivery not made by a loop.
func (m *Delivery) AckWait() time.Duration {
	if m.ackWait == nil {
		return DefaultAckWait
	}
	return time.Duration(m.ackWait.Load())
}

// Handler handles one message. A nil error acks it; any other error retries
// it later (see RetryAfter and DeadLetter for the other outcomes).
type Handler func(ctx context.Context, m *Delivery) error

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

// RetryDelay reports whether a handler's error err is RetryAfter's, and
// after how long its message comes back: for tests that call a handler
// without a consumer.
func RetryDelay(err error) (time.Duration, bool) {
	var retry *retryError
	if errors.As(err, &retry) {
		return retry.after, true
	}
	return 0, false
}

// DeadLettered reports whether a handler's error err is DeadLetter's.
func DeadLettered(err error) bool {
	var dead *deadLetterError
	return errors.As(err, &dead)
}

// ConsumeConfig is what one durable consumer loop is.
type ConsumeConfig struct {
	Stream  Stream
	Durable string
	// FilterSubjects narrows the stream; empty means every subject.
	FilterSubjects []string
	// AckWait is how long the server waits for an ack before redelivering.
	// Zero keeps an existing consumer's, so that creating or binding it
	// again never undoes what an operator set, and is DefaultAckWait for a
	// new one. Handlers that run longer are kept alive with InProgress
	// every half of the consumer's ack wait, as the loop last read it.
	AckWait time.Duration
	// ConfigRead is how often the loop reads its consumer's ack wait
	// again, to follow one an operator changed; default 30s. (Request
	// limits are read again when the server refuses a request.)
	ConfigRead time.Duration
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
	// Prefetch, when set, bounds what the loop holds: at most Concurrency +
	// Prefetch messages, those being handled, those waiting for a goroutine
	// and those asked for and not yet arrived; it asks for more only as
	// room frees up, with one pull request open at a time. Zero pulls in
	// batches of up to 256, for short handlers. Not with PartitionKey.
	Prefetch int
	// Timeout, when set, bounds each handler: its context is cancelled
	// with TimeoutCause (default ErrHandlerTimeout) after it.
	Timeout      time.Duration
	TimeoutCause error
	// StopCause is the cause the handlers' contexts are cancelled with
	// when Stop's context ends before they finish; default
	// ErrConsumerStopped.
	StopCause error
	// PartitionKey, when set, sends messages with the same key to the same
	// goroutine, so they are handled one at a time in stream order.
	PartitionKey func(m *Delivery) string
	// DeliverNew makes a consumer created now start with messages published
	// from now on instead of the whole stream. It only matters at creation:
	// an existing consumer keeps its position.
	DeliverNew bool
	// OnDeadLetter, when set, is called after a message was dead-lettered.
	OnDeadLetter func(m *Delivery, reason error)
	// Logger receives retries and dead letters; default slog.Default().
	Logger *slog.Logger
}

// DefaultAckWait is a new consumer's ack wait when its ConsumeConfig sets
// none.
const DefaultAckWait = 30 * time.Second

func (cc ConsumeConfig) withDefaults() ConsumeConfig {
	if cc.MaxDeliver == 0 {
		cc.MaxDeliver = 10
	}
	if cc.ConfigRead <= 0 {
		cc.ConfigRead = 30 * time.Second
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
	if cc.TimeoutCause == nil {
		cc.TimeoutCause = ErrHandlerTimeout
	}
	if cc.StopCause == nil {
		cc.StopCause = ErrConsumerStopped
	}
	return cc
}

// jetstreamConfig is the server-side consumer of cc.
func (cc ConsumeConfig) jetstreamConfig() jetstream.ConsumerConfig {
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
	cc     ConsumeConfig
	client *Client
	cctx   jetstream.ConsumeContext
	queues []chan *held
	wg     sync.WaitGroup
	once   sync.Once
	// ctx ends when the loop stops taking messages; work, when the
	// handlers' contexts are cancelled.
	ctx    context.Context
	cancel context.CancelFunc
	work   context.Context
	abort  context.CancelCauseFunc
	// Bounded mode: credits holds one token per message held or asked
	// for; pulling ends when the fetch loop has.
	credits chan struct{}
	pulling sync.WaitGroup
	// failing paces the pull requests after failed ones, and limits is
	// what the server consumer lets one request ask for; only the fetch
	// loop uses them.
	failing pullBackoff
	limits  requestLimits
	// set is what the operator allows as last read (either mode).
	set operatorLimits
	// ackWait is the bound consumer's, as last read (nanoseconds): the
	// leases and handlers read it while a read of the consumer's
	// configuration may replace it. leases are the messages held, renewed
	// at once when it changes.
	ackWait atomic.Int64
	leases  leaseSet
	stopped lifecycle.Stopped
	// Batched mode: mu guards cctx, which a limits change or a rebind
	// replaces; rebound is when the last rebind bound (watchBatched's).
	mu      sync.Mutex
	rebound time.Time
}

// held is a message the loop holds, kept alive from its arrival.
type held struct {
	raw   jetstream.Msg
	lease *lease
}

// Consume creates or updates the durable consumer and runs h on its messages
// until Stop.
func (c *Client) Consume(ctx context.Context, cc ConsumeConfig, h Handler) (*Consumer, error) {
	cc = cc.withDefaults()
	if cc.Prefetch > 0 && cc.PartitionKey != nil {
		return nil, fmt.Errorf("consumer %s: Prefetch and PartitionKey cannot be combined", cc.Durable)
	}
	cons, err := c.consumer(ctx, c.StreamName(cc.Stream), cc.jetstreamConfig())
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", cc.Durable, cc.Stream, err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	work, abort := context.WithCancelCause(context.Background())
	k := &Consumer{cc: cc, client: c, ctx: lctx, cancel: cancel, work: work, abort: abort}
	// Bounded: one queue shared by every goroutine, with room for all the
	// loop may hold, so taking a message never blocks. Batched: a queue per
	// goroutine.
	k.queues = make([]chan *held, cc.Concurrency)
	if cc.Prefetch > 0 {
		limit := cc.Concurrency + cc.Prefetch
		k.credits = make(chan struct{}, limit)
		shared := make(chan *held, limit)
		for i := range k.queues {
			k.queues[i] = shared
		}
	}
	for i := range k.queues {
		if k.queues[i] == nil {
			k.queues[i] = make(chan *held, 64)
		}
		q := k.queues[i]
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			for m := range q {
				k.handle(h, m)
			}
		}()
	}
	bound := cons.CachedInfo().Config
	k.adopt(bound)
	if k.credits != nil {
		k.pulling.Add(2)
		go k.pull(cons)
		go k.rereadAckWait(cons)
		return k, nil
	}
	failed := make(chan struct{}, 1)
	if k.cctx, err = k.consumeBatched(cons, bound, failed); err != nil {
		k.closeQueues()
		k.wg.Wait()
		return nil, fmt.Errorf("consume %s: %w", cc.Durable, translate(err))
	}
	k.pulling.Add(2)
	go k.watchBatched(cons, failed)
	go k.rereadAckWait(cons)
	return k, nil
}

// consumeBatched starts nats.go's Consume within the limits cfg sets; a
// failed request signals failed.
func (k *Consumer) consumeBatched(cons jetstream.Consumer, cfg jetstream.ConsumerConfig, failed chan<- struct{}) (jetstream.ConsumeContext, error) {
	return cons.Consume(k.dispatch, append(batchedLimits(cfg, k.cc),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConsumerDeleted) {
				return
			}
			k.cc.Logger.Debug("consume", "consumer", k.cc.Durable, "error", err)
			select {
			case failed <- struct{}{}:
			default:
			}
		}))...)
}

// watchBatched keeps the batched mode consuming (nats.go's Consume).
// After a failed request it reads the consumer's configuration again: it
// takes its ack wait and, when an operator changed its request limits,
// consumes within the new ones: nats.go keeps
// asking as it started, and a consumer that now allows less refuses every
// request. When nats.go ends the consume on its own (the consumer was
// deleted, or refuses every request for good), it binds to the consumer
// again (a client that provisions creates it again), paced like failed
// pull requests, and consumes on. A new consume starts before the old one
// is drained, so the consumer is never left without one.
func (k *Consumer) watchBatched(cons jetstream.Consumer, failed chan struct{}) {
	defer k.pulling.Done()
	for {
		k.mu.Lock()
		ended := k.cctx.Closed()
		k.mu.Unlock()
		var cfg jetstream.ConsumerConfig
		gone := false
		select {
		case <-k.ctx.Done():
			return
		case <-failed:
			var changed bool
			var err error
			cfg, changed, err = k.relimit(cons)
			// Deleted while nats.go asks on (no responders): as ended.
			if gone = errors.Is(err, jetstream.ErrConsumerNotFound); !gone && !changed {
				continue
			}
		case <-ended:
			gone = true
		}
		if gone {
			again, ok := k.rebindUntilBound()
			if !ok {
				return
			}
			cons, cfg = again, again.CachedInfo().Config
		}
		k.mu.Lock()
		if k.ctx.Err() != nil {
			k.mu.Unlock()
			return
		}
		next, err := k.consumeBatched(cons, cfg, failed)
		if err != nil {
			k.mu.Unlock()
			k.cc.Logger.Warn("consuming again failed; trying again at the next failure", "consumer", k.cc.Durable, "error", err)
			k.set = operatorLimits{batch: -1} // so the next read counts as a change
			continue
		}
		old := k.cctx
		k.cctx = next
		k.mu.Unlock()
		old.Drain()
		<-old.Closed()
	}
}

// rebindUntilBound binds to the consumer again, paced like failed pull
// requests, until it does or the loop stops (false).
func (k *Consumer) rebindUntilBound() (jetstream.Consumer, bool) {
	for k.ctx.Err() == nil {
		if cons, ok := k.rebind(); ok {
			return cons, true
		}
	}
	return nil, false
}

// rebind waits as after a failed pull request and binds to the consumer
// again, after nats.go ended consuming it; it reports whether it did. A
// consume that ends again within a minute of a rebind counts as failing
// in a row (a consumer that refuses every request for good, status 400).
func (k *Consumer) rebind() (jetstream.Consumer, bool) {
	if time.Since(k.rebound) > time.Minute {
		k.failing.reset()
	}
	wait, warn := k.failing.failed()
	level := slog.LevelDebug
	switch {
	case k.failing.streak == 1:
		level = slog.LevelError
	case warn:
		level = slog.LevelWarn
	}
	k.cc.Logger.Log(k.ctx, level, "consuming ended (the consumer was deleted, or refuses every request); binding to it again",
		"consumer", k.cc.Durable, "failures", k.failing.streak, "retry_in", wait)
	select {
	case <-time.After(wait):
	case <-k.ctx.Done():
		return nil, false
	}
	ctx, cancel := context.WithTimeout(k.ctx, k.client.cfg.Timeout)
	defer cancel()
	cons, err := k.client.consumer(ctx, k.client.StreamName(k.cc.Stream), k.cc.jetstreamConfig())
	if err != nil {
		k.cc.Logger.Debug("binding to the consumer again failed", "consumer", k.cc.Durable, "error", err)
		return nil, false
	}
	k.rebound = time.Now()
	k.adopt(cons.CachedInfo().Config)
	k.cc.Logger.Info("consuming again", "consumer", k.cc.Durable)
	return cons, true
}

// consumer returns the durable consumer want on stream. A client that has
// provisioned creates it or updates it, keeping an existing consumer's
// starting point; any other binds to the consumer as it exists, changing
// nothing, and fails with ErrNotProvisioned when it is missing or reads
// other subjects.
func (c *Client) consumer(ctx context.Context, stream string, want jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	var cons jetstream.Consumer
	err := c.converge(ctx, func(ctx context.Context) error {
		var err error
		cons, err = c.bindOrCreate(ctx, stream, want)
		return err
	})
	if err != nil && !errors.Is(err, ErrNotProvisioned) {
		err = translate(err)
	}
	return cons, err
}

// bindOrCreate is one attempt of consumer.
func (c *Client) bindOrCreate(ctx context.Context, stream string, want jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	existing, err := c.js.Consumer(ctx, stream, want.Durable)
	switch {
	case err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, err
	case !c.Provisioner() && err != nil:
		return nil, fmt.Errorf("%w: consumer %s on stream %s does not exist", ErrNotProvisioned, want.Durable, stream)
	case !c.Provisioner():
		if have := existing.CachedInfo().Config; !sameFilter(have, want) {
			return nil, fmt.Errorf("%w: consumer %s reads %v, this process needs %v", ErrNotProvisioned,
				want.Durable, filters(have), filters(want))
		}
		return existing, nil
	case err == nil:
		// Keep where it starts, how many copies it has, and the limits an
		// operator set on its pull requests (which workers ask within).
		have := existing.CachedInfo().Config
		want.DeliverPolicy = have.DeliverPolicy
		want.Replicas = max(want.Replicas, have.Replicas)
		want.MaxRequestBatch, want.MaxRequestExpires = have.MaxRequestBatch, have.MaxRequestExpires
		want.MaxRequestMaxBytes, want.MaxWaiting = have.MaxRequestMaxBytes, have.MaxWaiting
		if want.AckWait == 0 {
			want.AckWait = have.AckWait
		}
	}
	want.AckWait = cmp.Or(want.AckWait, DefaultAckWait)
	return c.js.CreateOrUpdateConsumer(ctx, stream, want)
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
func (c *Client) CreateConsumer(ctx context.Context, cc ConsumeConfig) error {
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

// fetchWait is how long one pull request of the bounded mode waits at the
// server for messages; fetchHeartbeat is how often the server says it still
// holds the request, so a request lost with its server or consumer leader
// (a failover) is replaced after two missed heartbeats, not at fetchWait.
// A consumer's MaxRequestExpires lowers both (limitsOf).
const (
	fetchWait      = 10 * time.Second
	fetchHeartbeat = time.Second
)

// limitsRead bounds a read of the consumer's request limits.
const limitsRead = time.Second

// pull is the bounded mode's loop: it asks the server for as many messages
// as there is room for, up to the consumer's MaxRequestBatch, in one pull
// request at a time. While a request is
// open, messages arrive on it as they are published and room freed by
// handled ones waits for the next request; that one is sent as soon as the
// open one is filled or expires (fetchWait). On a cluster every pull
// request is two Raft entries of the consumer, its arrival and its end, so
// a request per freed place cost about two entries per message (issue 25).
func (k *Consumer) pull(cons jetstream.Consumer) {
	defer k.pulling.Done()
	for {
		select {
		case k.credits <- struct{}{}:
		case <-k.ctx.Done():
			return
		}
		n := 1
	more:
		for n < min(cap(k.credits), k.limits.batch) {
			select {
			case k.credits <- struct{}{}:
				n++
			default:
				break more
			}
		}
		k.fetch(cons, n)
	}
}

// fetch asks for n messages, for which it holds n credits, and dispatches
// those that arrive; the credits of those that do not are given back.
func (k *Consumer) fetch(cons jetstream.Consumer, n int) {
	got := 0
	defer func() {
		for ; got < n; got++ {
			<-k.credits
		}
	}()
	ctx, cancel := context.WithTimeout(k.ctx, k.limits.wait)
	defer cancel()
	batch, err := cons.Fetch(n, jetstream.FetchContext(ctx), jetstream.FetchHeartbeat(k.limits.heartbeat))
	if err != nil {
		// The connection or the server is down: do not spin.
		k.retryLater(cons, "pull request failed; asking again later", n, err)
		return
	}
	for m := range batch.Messages() {
		got++
		k.dispatch(m)
	}
	switch err := batch.Error(); {
	case got > 0 || err == nil || errors.Is(err, jetstream.ErrNoHeartbeat) || ctx.Err() != nil:
		// Filled, expired, or lost with its server (asked again at once).
		k.failing.reset()
	default:
		// Ended by the server with nothing: a status 409 (a leadership
		// change, the consumer deleted, a limit of the consumer below what
		// was asked) or 503 (no consumer leader yet). Asked again at once,
		// a request can be refused as fast, for good.
		k.retryLater(cons, "pull request refused; asking again later", n, err)
	}
}

// requestLimits are what one pull request of the bounded mode asks for at
// most: messages, how long it waits at the server, and how often the
// server says it still holds it.
type requestLimits struct {
	batch     int
	wait      time.Duration
	heartbeat time.Duration
}

// limitsOf keeps a pull request within what the consumer allows
// (MaxRequestBatch, MaxRequestExpires, set by an operator): asked for more,
// the server refuses every request with status 409. The heartbeat stays
// at most a quarter of the wait (the server refuses one over half).
func limitsOf(cfg jetstream.ConsumerConfig) requestLimits {
	l := requestLimits{batch: math.MaxInt, wait: fetchWait, heartbeat: fetchHeartbeat}
	if cfg.MaxRequestBatch > 0 {
		l.batch = cfg.MaxRequestBatch
	}
	if cfg.MaxRequestExpires > 0 {
		l.wait = min(l.wait, cfg.MaxRequestExpires)
	}
	l.heartbeat = min(l.heartbeat, l.wait/4)
	return l
}

// batchedLimits are the batched mode's pull options: batches of up to 256
// messages, within the consumer's MaxRequestBatch and MaxRequestExpires as
// they are when it binds (nats.go's requests otherwise wait 30 s, and a
// consumer that allows less refuses every one). nats.go asks for at least
// a second. The server says it still holds a request every second (a
// quarter of a shorter wait, at least nats.go's 500 ms): nats.go's own 5 s
// took 10 s to notice a request lost with its server, or with its
// consumer.
func batchedLimits(cfg jetstream.ConsumerConfig, cc ConsumeConfig) []jetstream.PullConsumeOpt {
	batch := min(cc.MaxAckPending, 256)
	if cfg.MaxRequestBatch > 0 {
		batch = min(batch, cfg.MaxRequestBatch)
	}
	wait := batchedWait
	if cfg.MaxRequestExpires > 0 {
		if cfg.MaxRequestExpires < time.Second {
			cc.Logger.Error("the consumer allows pull requests shorter than the second nats.go asks for at least; "+
				"every request is refused until an operator raises max_expires", "consumer", cc.Durable,
				"max_expires", cfg.MaxRequestExpires)
		}
		wait = min(max(cfg.MaxRequestExpires, time.Second), batchedWait)
	}
	return []jetstream.PullConsumeOpt{jetstream.PullMaxMessages(batch), jetstream.PullExpiry(wait),
		jetstream.PullHeartbeat(max(500*time.Millisecond, min(fetchHeartbeat, wait/4)))}
}

// batchedWait is how long a batched mode's pull request waits: nats.go's
// default.
const batchedWait = 30 * time.Second

// operatorLimits are the limits an operator may set on a consumer's pull
// requests, as the server has them.
type operatorLimits struct {
	batch   int
	expires time.Duration
}

func operatorLimitsOf(cfg jetstream.ConsumerConfig) operatorLimits {
	return operatorLimits{batch: cfg.MaxRequestBatch, expires: cfg.MaxRequestExpires}
}

// adopt takes the request limits and the ack wait of the consumer's
// configuration cfg.
func (k *Consumer) adopt(cfg jetstream.ConsumerConfig) {
	k.set, k.limits = operatorLimitsOf(cfg), limitsOf(cfg)
	k.takeAckWait(cfg)
}

// takeAckWait takes the ack wait of the consumer's configuration cfg, and
// reports whether it changed.
func (k *Consumer) takeAckWait(cfg jetstream.ConsumerConfig) bool {
	next := cmp.Or(cfg.AckWait, DefaultAckWait)
	changed := time.Duration(k.ackWait.Swap(int64(next))) != next
	if changed && next < minAckWait {
		k.cc.Logger.Warn("the consumer's ack wait is under a second: held messages are renewed at least every 10ms, "+
			"and one whose renewal is late is handed to another process", "consumer", k.cc.Durable, "ack_wait", next)
	}
	return changed
}

// renewal is how often a held message is renewed: half the consumer's
// ack wait, and never more often than every 10ms (an ack wait an operator
// set absurdly short would otherwise make a renewal loop).
func (k *Consumer) renewal() time.Duration {
	return max(time.Duration(k.ackWait.Load())/2, 10*time.Millisecond)
}

// minAckWait is the least ack wait held messages are safe with under load.
const minAckWait = time.Second

// followAckWait takes the ack wait of the consumer's configuration cfg,
// read again while the loop runs, and says when it changed.
func (k *Consumer) followAckWait(cfg jetstream.ConsumerConfig) {
	if was := k.renewal(); k.takeAckWait(cfg) {
		k.cc.Logger.Warn("the consumer's ack wait changed; renewing held messages within it", "consumer", k.cc.Durable,
			"ack_wait", cfg.AckWait, "renewed_every_was", was)
		// A held message's next renewal was set by the old ack wait: with
		// a shorter one it would come after the server had handed the
		// message on.
		k.leases.renewAll()
	}
}

// rereadAckWait reads the consumer's ack wait again every ConfigRead,
// whatever the loop is doing: an idle pull request waits up to 10 s, and
// long handlers may hold all the room for as long as they run.
func (k *Consumer) rereadAckWait(cons jetstream.Consumer) {
	defer k.pulling.Done()
	t := time.NewTicker(k.cc.ConfigRead)
	defer t.Stop()
	for {
		select {
		case <-k.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(k.ctx, limitsRead)
		info, err := cons.Info(ctx)
		cancel()
		if err == nil { // a consumer gone or unreachable: the loop's next request says so
			k.followAckWait(info.Config)
		}
	}
}

// relimit reads the consumer's configuration again after a failed
// request: it takes its ack wait, and returns the configuration and
// whether its request limits changed since last read, or the error
// reading it.
func (k *Consumer) relimit(cons jetstream.Consumer) (jetstream.ConsumerConfig, bool, error) {
	if k.ctx.Err() != nil {
		return jetstream.ConsumerConfig{}, false, k.ctx.Err()
	}
	ctx, cancel := context.WithTimeout(k.ctx, limitsRead)
	defer cancel()
	info, err := cons.Info(ctx)
	if err != nil {
		return jetstream.ConsumerConfig{}, false, err
	}
	k.followAckWait(info.Config)
	if set := operatorLimitsOf(info.Config); set != k.set {
		k.cc.Logger.Warn("the consumer's request limits changed; asking within them", "consumer", k.cc.Durable,
			"max_batch", info.Config.MaxRequestBatch, "max_expires", info.Config.MaxRequestExpires)
		k.adopt(info.Config)
		return info.Config, true, nil
	}
	return info.Config, false, nil
}

// retryLater logs a failed pull request (a warning once failures in a row
// last, debug before), waits before the next one, or until the consumer
// stops, and reads the consumer's request limits again: an operator may
// have lowered them.
func (k *Consumer) retryLater(cons jetstream.Consumer, msg string, n int, err error) {
	wait, warn := k.failing.failed()
	level := slog.LevelDebug
	if warn {
		level = slog.LevelWarn
	}
	k.cc.Logger.Log(k.ctx, level, msg, "consumer", k.cc.Durable, "batch", n, "error", err,
		"failures", k.failing.streak, "retry_in", wait)
	select {
	case <-time.After(wait):
	case <-k.ctx.Done():
	}
	k.relimit(cons)
}

// pullBackoff paces pull requests that fail in a row: the waits double from
// pullRetryFirst up to pullRetryMost, so a failover (a consumer without a
// leader for a second or two) delays work by at most about that, and a
// refusal for good costs one request every pullRetryMost, not thousands a
// second. The fourth failure in a row is worth a warning, and every
// pullWarnEvery-th after it.
type pullBackoff struct {
	wait   time.Duration
	streak int
}

// How failed pull requests are paced and reported (pullBackoff).
const (
	pullRetryFirst = 100 * time.Millisecond
	pullRetryMost  = 2 * time.Second
	pullWarnAfter  = 4
	pullWarnEvery  = 30
)

// failed counts one more failure and returns the wait before the next
// request and whether to warn about it.
func (b *pullBackoff) failed() (time.Duration, bool) {
	b.streak++
	b.wait = min(max(2*b.wait, pullRetryFirst), pullRetryMost)
	over := b.streak - pullWarnAfter
	return b.wait, over >= 0 && over%pullWarnEvery == 0
}

// reset starts again after a request that was filled or expired.
func (b *pullBackoff) reset() { *b = pullBackoff{} }

// release gives back the credit of a message the bounded mode is done with.
func (k *Consumer) release() {
	if k.credits != nil {
		<-k.credits
	}
}

// dispatch takes a message as it arrives: from then on it is kept alive
// until handled. In batched mode it blocks while the message's queue is
// full; in bounded mode there is always room.
func (k *Consumer) dispatch(m jetstream.Msg) {
	hm := &held{raw: m, lease: hold(m, k.renewal, &k.leases)}
	i := 0
	if k.cc.PartitionKey != nil && len(k.queues) > 1 {
		h := fnv.New32a()
		_, _ = h.Write([]byte(k.cc.PartitionKey(&Delivery{Subject: m.Subject(), Data: m.Data(), Header: Header(m.Headers())})))
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
	case k.queues[i] <- hm:
	case <-k.ctx.Done():
		hm.lease.release()
		_ = m.Nak()
		k.release()
	}
}

func (k *Consumer) handle(h Handler, hm *held) {
	defer k.release()
	raw := hm.raw
	if k.ctx.Err() != nil {
		// Stopping: another process takes it at once.
		hm.lease.release()
		_ = raw.Nak()
		return
	}
	meta, err := raw.Metadata()
	if err != nil {
		hm.lease.release()
		_ = raw.Term()
		return
	}
	m := &Delivery{
		Subject: raw.Subject(), Data: raw.Data(), Header: Header(raw.Headers()),
		Stream: meta.Stream, Sequence: meta.Sequence.Stream, Deliveries: meta.NumDelivered, Time: meta.Timestamp,
		ackWait: &k.ackWait,
	}
	hctx, cancel := context.WithCancel(k.work)
	if k.cc.Timeout > 0 {
		hctx, cancel = context.WithTimeoutCause(k.work, k.cc.Timeout, k.cc.TimeoutCause)
	}
	// The message stays alive until the handler returns or its context
	// ends, whichever comes first.
	ended := context.AfterFunc(hctx, hm.lease.end)
	err = runHandler(hctx, h, m)
	ended()
	hm.lease.release()
	cancel()

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
	case errors.Is(err, ErrUnavailable):
		// A leader election: over in seconds, so retry soon, not after
		// the backoff of a failing handler.
		_ = raw.NakWithDelay(min(100*time.Millisecond<<(m.Deliveries-1), 2*time.Second))
	default:
		i := min(int(m.Deliveries)-1, len(k.cc.BackOff)-1)
		k.cc.Logger.Warn("handler failed; will retry", "consumer", k.cc.Durable, "subject", m.Subject,
			"seq", m.Sequence, "delivery", m.Deliveries, "retry_in", k.cc.BackOff[i], "error", err)
		_ = raw.NakWithDelay(k.cc.BackOff[i])
	}
}

// lease keeps a held message from being redelivered: InProgress every
// interval (read at each renewal) until released.
type lease struct {
	raw      jetstream.Msg
	interval func() time.Duration
	set      *leaseSet
	mu       sync.Mutex
	t        *time.Timer
	done     bool
}

// hold starts renewing raw, a member of set until released.
func hold(raw jetstream.Msg, interval func() time.Duration, set *leaseSet) *lease {
	l := &lease{raw: raw, interval: interval, set: set}
	l.mu.Lock()
	l.t = time.AfterFunc(interval(), l.renew)
	l.mu.Unlock()
	set.add(l) // once its timer exists: renewAll resets it
	return l
}

// renew tells the server the message is still held, and sets the next
// renewal. One that could not be sent (a connection reconnecting with a
// full buffer) is tried again a quarter interval later, not given up: the
// server waits an AckWait from the last renewal it got, so a lease given up
// would hand the message to another process while its handler still runs.
func (l *lease) renew() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	next := l.interval()
	if l.raw.InProgress() != nil {
		next = max(next/4, time.Millisecond)
	}
	l.t.Reset(next)
}

// leaseSet is the leases held by one loop.
type leaseSet struct {
	mu sync.Mutex
	m  map[*lease]struct{}
}

func (s *leaseSet) add(l *lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[*lease]struct{}{}
	}
	s.m[l] = struct{}{}
}

func (s *leaseSet) remove(l *lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, l)
}

// renewAll renews every lease held now, each then on at its interval.
func (s *leaseSet) renewAll() {
	s.mu.Lock()
	held := make([]*lease, 0, len(s.m))
	for l := range s.m {
		held = append(held, l)
	}
	s.mu.Unlock()
	for _, l := range held {
		l.renew()
	}
}

// end renews the lease one last time, so that the server waits a whole
// AckWait from now before it hands the message to another process, and
// stops renewing: for a handler whose context has ended.
func (l *lease) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		_ = l.raw.InProgress()
	}
	l.done = true
	l.t.Stop()
}

// release stops renewing, for good.
func (l *lease) release() {
	l.mu.Lock()
	l.done = true
	l.t.Stop()
	l.mu.Unlock()
	l.set.remove(l)
}

func runHandler(ctx context.Context, h Handler, m *Delivery) (err error) {
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
func (k *Consumer) deadLetter(raw jetstream.Msg, m *Delivery, reason error) {
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
		// A nonce of its own: a predictable id would let anyone who may
		// write the dead-letter stream store it first and have this one
		// dropped as a duplicate.
		_, err = k.client.Publish(ctx, subject, m.Data, subjects.DeadLetterMsgID(k.cc.Durable, m.Stream, m.Sequence)+":"+rand.Text(), h)
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
	_ = raw.TermWithReason(textcut.Truncate(reason.Error(), 200))
}

// ErrConsumerStopped is the default cause the handlers' contexts are
// cancelled with when Stop's context ends before they finish
// (ConsumeConfig.StopCause).
var ErrConsumerStopped = errors.New("consumer stopped")

// Stop stops fetching, nak's the messages fetched but not started (another
// process takes them at once), and waits for the handlers to finish the
// messages they hold while ctx lasts; when ctx ends first, their contexts
// are cancelled with ConsumeConfig.StopCause and Stop returns an error
// wrapping ctx's, without waiting any longer (lifecycle.Wait). Stop again
// is harmless.
func (k *Consumer) Stop(ctx context.Context) error {
	k.once.Do(func() {
		k.cancel()
		k.mu.Lock()
		cctx := k.cctx
		k.mu.Unlock()
		if cctx != nil {
			cctx.Stop()
			<-cctx.Closed()
		}
		k.pulling.Wait()
		k.closeQueues()
	})
	defer k.stopped.Close()
	done := make(chan struct{})
	go func() { k.wg.Wait(); close(done) }()
	if err := lifecycle.Wait(ctx, done, func() { k.abort(k.cc.StopCause) }); err != nil {
		return fmt.Errorf("consumer %s: %w", k.cc.Durable, err)
	}
	return nil
}

// Stopped returns a channel closed once Stop has returned: the consumer
// takes no more messages, and its handlers have finished or had their
// contexts cancelled.
func (k *Consumer) Stopped() <-chan struct{} { return k.stopped.C() }

// Cancel cancels the contexts of the handlers under way, and of any started
// later, with cause.
func (k *Consumer) Cancel(cause error) { k.abort(cause) }

func (k *Consumer) closeQueues() {
	closed := map[chan *held]bool{}
	for _, q := range k.queues {
		if !closed[q] {
			close(q)
			closed[q] = true
		}
	}
}

// Consumers is a set of consumer loops started together and stopped
// together. The zero value is ready to use.
type Consumers struct {
	mu      sync.Mutex
	list    []*Consumer
	stopped lifecycle.Stopped
}

// Stopped returns a channel closed once Stop has returned: the consumers
// take no more messages, and their handlers have finished or had their
// contexts cancelled.
func (s *Consumers) Stopped() <-chan struct{} { return s.stopped.C() }

// Add keeps c to be stopped with the others.
func (s *Consumers) Add(c *Consumer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, c)
}

// Stop stops every consumer added, as Consumer.Stop does, all at once and
// within ctx. Stop again, or with none added, is harmless.
func (s *Consumers) Stop(ctx context.Context) error {
	s.mu.Lock()
	list := s.list
	s.list = nil
	s.mu.Unlock()
	defer s.stopped.Close()
	errs := make([]error, len(list))
	var wg sync.WaitGroup
	for i, c := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Stop(ctx)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Cancel cancels the handlers of every consumer added, with cause.
func (s *Consumers) Cancel(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.list {
		c.Cancel(cause)
	}
}
