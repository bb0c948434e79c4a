// Package coordinator is Interlock's coordinator service: the only writer
// of run records. It consumes pass outcomes, decisions and due timers,
// applies the rules of package rules to each, stores the new record with
// compare-and-set (store.Update) and then publishes what the change
// implies: the pending index, timers, the replay's work item, events and
// the decision's verdict. Every publish is deduplicated by what it is
// about, so a coordinator that crashes anywhere converges on redelivery,
// and any number of coordinators may run against one NATS deployment.
//
// A decision's path: decision.go checks and records it; replay.go queues
// the replay when it was the last one its pass waited for; events.go
// publishes the events.
package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/policy"
	"github.com/interlockhq/interlock/processor/rules"
	"github.com/interlockhq/interlock/processor/schema"
	"github.com/interlockhq/interlock/processor/store"
	"github.com/interlockhq/interlock/subjects"
)

// Config is what a coordinator is.
type Config struct {
	// Concurrency is the number of messages handled at once per input
	// stream; messages of one run are handled in order. Default 4.
	Concurrency int
	// AckWait before another coordinator takes over an unacked message;
	// zero keeps the consumers' own (30s for new ones).
	AckWait time.Duration
	Logger  *slog.Logger
	// Now is the clock used for expiry; default time.Now.
	Now func() time.Time
	// Expiry holds the defaults for deadlines, reminders and escalation.
	Expiry rules.ExpiryDefaults
	// Groups maps an approver identity to its groups, for interrupts that
	// name approver groups.
	Groups func(identity string) []string
	// Members lists a group's members, for counting who can vote on an
	// interrupt with a policy (a policy that needs more is refused).
	Members func(group string) []string
	// Policies are the operator's decision rules (interlock serve
	// --policies); nil: none.
	Policies *policy.Set
	// Registry, when set, receives the coordinator's Prometheus metrics.
	Registry prometheus.Registerer
	// SchemaBudget bounds checking one payload against its responseSchema;
	// default schema.DefaultBudget.
	SchemaBudget time.Duration
	// TopologyInterval is how often a running coordinator checks that the
	// streams and buckets keep what was provisioned (it always checks at
	// start); default DefaultTopologyInterval, negative: only at start.
	TopologyInterval time.Duration
	// IndexInterval is how often a running coordinator checks that the
	// pending index is whole, and builds it from the records when it is
	// not (it always checks once it has started); default
	// DefaultIndexInterval, negative: only then.
	IndexInterval time.Duration
	// Store keeps the run records, the pending index and the events, and
	// commits what a record change implies; default the JetStream store
	// through New's client (store.NewJetStream).
	Store store.Store
	// NATS is what the coordinator does on NATS besides its store;
	// default New's client.
	NATS NATS
}

// NATS is what the coordinator does on NATS directly, outside its store:
// it names subjects in the deployment's namespace, answers a decision's
// sender on the sender's inbox, reads the deployment's message-id key (the
// replays and notices it queues carry ids signed with it), and at a fault
// point drops its connection with the message in hand unacked.
// *jetstream.Client implements it. Consuming the inputs and checking the
// topology (Start) need the client itself.
type NATS interface {
	// Namespace is the deployment's subject namespace.
	Namespace() subjects.Namespace
	// Notify sends data to subject without storing it: a verdict reply.
	Notify(subject string, data []byte) error
	// IDSigner reads the deployment's message-id key.
	IDSigner(ctx context.Context) (*jetstream.IDSigner, error)
	// Close drops the connection: what a crash does (fault injection).
	Close()
}

var _ NATS = (*jetstream.Client)(nil)

// ErrNoClient is Start's error for a coordinator New was given no client
// for: it has a store and NATS to handle messages with, but nothing to
// consume them from.
var ErrNoClient = errors.New("coordinator: Start needs a *jetstream.Client")

// Coordinator is the only writer of run records.
type Coordinator struct {
	// client consumes the inputs and checks the topology (Start); nats
	// and store are what handling a message uses.
	client  *jetstream.Client
	nats    NATS
	store   store.Store
	cfg     Config
	ns      subjects.Namespace
	rules   rules.Set
	running jetstream.Consumers
	// watch checks the topology while running; stopWatch ends it.
	watch     *topologyWatch
	stopWatch func()
	// stopAsks stops answering workers' asks (serveAsks).
	stopAsks func()
	// index builds the pending index when it is lost; stopIndex ends its
	// checks.
	index     *indexKeeper
	stopIndex func()
	metrics   *metrics
	// ids signs the message ids of what the coordinator publishes into
	// streams other roles write too (work items, notices).
	ids *jetstream.IDSigner
	// sealed says the runs bucket keeps its records in memory, so the
	// store keeps their copies with the rules of that layout (every store
	// carries them in the trail); restores, that it puts back records the
	// bucket lost (records.go).
	sealed, restores bool
	// fault, in tests, abandons a message at a named point.
	fault fault.Hook
}

// New returns a coordinator consuming through c, keeping records in
// cfg.Store and acting on NATS through cfg.NATS (both default to ones
// through c). c may be nil when both are given: such a coordinator handles
// the messages given to it (tests) but cannot Start.
func New(c *jetstream.Client, cfg Config) *Coordinator {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.TopologyInterval == 0 {
		cfg.TopologyInterval = DefaultTopologyInterval
	}
	if cfg.IndexInterval == 0 {
		cfg.IndexInterval = DefaultIndexInterval
	}
	if cfg.Store == nil {
		cfg.Store = store.NewJetStream(c)
	}
	if cfg.NATS == nil {
		cfg.NATS = c
	}
	co := &Coordinator{client: c, nats: cfg.NATS, store: cfg.Store, cfg: cfg, ns: cfg.NATS.Namespace(),
		metrics: newMetrics(),
		rules: rules.Set{Expiry: cfg.Expiry, Groups: cfg.Groups, Members: cfg.Members,
			Schemas: &schema.Cache{Budget: cfg.SchemaBudget}}}
	co.index = &indexKeeper{co: co, id: newKeeperID()}
	if cfg.Policies != nil {
		co.rules.Operator = cfg.Policies.Ruling
	}
	co.rules.ExecutionKey = func(run, interrupt, digest string) string {
		if co.ids == nil {
			return ""
		}
		return co.ids.ExecutionKey(run, interrupt, digest)
	}
	return co
}

// input is one stream the coordinator consumes.
type input struct {
	stream  jetstream.Stream
	durable string
	filter  []string
	handle  jetstream.Handler
}

// inputs are the coordinator's durable consumers and their handlers.
func (co *Coordinator) inputs() []input {
	ns := co.ns
	return []input{
		{jetstream.StreamRuns, "coordinator_runs", []string{ns.All(subjects.KindSuspended), ns.All(subjects.KindCompleted),
			ns.All(subjects.KindFailed)}, co.handleOutcome},
		{jetstream.StreamDecisions, "coordinator_decisions", nil, co.handleDecision},
		{jetstream.StreamTimers, "coordinator_timers", []string{ns.TimersDue()}, co.handleTimer},
		{jetstream.StreamObserved, "coordinator_observed", nil, co.handleObserved},
	}
}

// consumeConfig is in's consumer.
func (co *Coordinator) consumeConfig(in input) jetstream.ConsumeConfig {
	byRun := func(m *jetstream.Delivery) string {
		a, _ := co.ns.Parse(m.Subject)
		return a.Run
	}
	return jetstream.ConsumeConfig{
		Stream: in.stream, Durable: in.durable, FilterSubjects: in.filter, AckWait: co.cfg.AckWait,
		// Decisions may wait for their suspension to be recorded.
		MaxDeliver:  50,
		Concurrency: co.cfg.Concurrency, PartitionKey: byRun, StopCause: ErrStopped, Logger: co.cfg.Logger,
	}
}

// Provision creates (or updates) the durable consumers a coordinator with
// cfg consumes, through c, which must have provisioned (`interlock
// provision` as admin): a coordinator connected as its own user may not
// create them. A zero cfg.AckWait keeps an existing consumer's (30s for a
// new one), so provisioning again does not undo serve's --ack-wait.
func Provision(ctx context.Context, c *jetstream.Client, cfg Config) error {
	co := New(c, cfg)
	for _, in := range co.inputs() {
		if err := c.CreateConsumer(ctx, co.consumeConfig(in)); err != nil {
			return err
		}
	}
	return nil
}

// Start checks that the streams and buckets keep what was provisioned
// (refusing to start with a *jetstream.DriftError, or ErrNotProvisioned
// when they are missing), then consumes outcomes, decisions, due timers and
// other roles' observations until Stop, checking the topology again every TopologyInterval. A context
// carrying a fault hook (internal/fault) abandons messages at its points,
// for crash tests.
func (co *Coordinator) Start(ctx context.Context) error {
	if co.client == nil {
		return ErrNoClient
	}
	co.fault = fault.From(ctx)
	if err := co.register(); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	co.watch = newTopologyWatch(co)
	if err := co.watch.start(ctx); err != nil {
		return err
	}
	if err := co.client.RequirePendingTTL(ctx); err != nil {
		return err
	}
	ids, err := co.nats.IDSigner(ctx)
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	co.ids = ids
	if s, ok := co.store.(interface{ SignIDs(*jetstream.IDSigner) }); ok {
		s.SignIDs(ids)
	}
	if err := co.sealRecords(ctx); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	// Records a restart lost are put back before anything is consumed, so
	// readers find them once the coordinator has started; a failure here
	// is the index check's to try again.
	if _, _, err := co.restoreRecords(ctx, co.index.id); err != nil {
		co.cfg.Logger.Warn("run records not put back yet", "error", err)
	}
	for _, in := range co.inputs() {
		cons, err := co.client.Consume(ctx, co.consumeConfig(in), in.handle)
		if err != nil {
			_ = co.running.Stop(context.WithoutCancel(ctx))
			return err
		}
		co.running.Add(cons)
	}
	co.stopWatch = co.watch.run(co.cfg.TopologyInterval)
	co.stopIndex = co.index.run(co.cfg.IndexInterval)
	if co.cfg.Policies != nil {
		stop, err := co.serveAsks()
		if err != nil {
			co.stopWatch()
			co.stopIndex()
			_ = co.running.Stop(context.WithoutCancel(ctx))
			return err
		}
		co.stopAsks = stop
	}
	return nil
}

// register registers the coordinator's metrics with cfg.Registry (Start does): a
// registry that refuses them (their names taken by other metrics) is an
// error.
func (co *Coordinator) register() error {
	reg := co.cfg.Registry
	if err := co.metrics.register(reg); err != nil {
		return err
	}
	if err := registerPending(reg, co.store); err != nil {
		return err
	}
	if co.client == nil {
		return nil // it consumes nothing: no consumer lag, no backlog to read
	}
	for _, in := range co.inputs() {
		if err := registerLag(reg, co.client, in.stream, in.durable); err != nil {
			return err
		}
	}
	return registerBacklog(reg, co.client)
}

// ErrStopped is the cause the contexts of the handlers still running are
// cancelled with when Stop's context ends before they finish.
var ErrStopped = errors.New("coordinator stopped")

// Stop stops consuming and the topology checks, and waits for the messages
// under way while ctx lasts; when ctx ends first, their handlers' contexts
// are cancelled (cause ErrStopped), the messages are redelivered later, and
// Stop returns an error wrapping ctx's. Stop before Start, or twice, is
// harmless.
func (co *Coordinator) Stop(ctx context.Context) error {
	if co.stopAsks != nil {
		co.stopAsks()
	}
	if co.stopWatch != nil {
		co.stopWatch()
	}
	if co.stopIndex != nil {
		co.stopIndex()
	}
	if err := co.running.Stop(ctx); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	return nil
}

// Stopped returns a channel closed once Stop has returned.
func (co *Coordinator) Stopped() <-chan struct{} { return co.running.Stopped() }

// errAbandoned is a handler's error at a fault point.
var errAbandoned = errors.New("abandoned by fault injection")

func (co *Coordinator) crash(point string) bool { return co.fault.Crash(point, co.nats.Close) }

func (co *Coordinator) now() time.Time { return co.cfg.Now().UTC() }

// recordLimit says, for a refusal, what a run record may have.
func (co *Coordinator) recordLimit() string {
	return fmt.Sprintf("the %d bytes a run record may have (the server's max payload, less room for the record's "+
		"sealed copy in the audit trail)", co.store.MaxRecord())
}

// update changes run's record through the one compare-and-set loop.
func (co *Coordinator) update(ctx context.Context, run string, change func(rec *subjects.Run) (*subjects.Run, error)) (*subjects.Run, error) {
	return store.Update(ctx, co.store, run, change)
}

// load returns run's record and revision; a nil record means none exists.
func (co *Coordinator) load(ctx context.Context, run string) (*subjects.Run, error) {
	rec, _, err := co.store.Run(ctx, run)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return rec, err
}

// exists reports whether run has a trail to file events under: it has a
// record, or its key holds a message the coordinator did not write
// (store.ErrForeignRecord), which is refused as its record but still
// names an audited run.
func (co *Coordinator) exists(ctx context.Context, run string) (bool, error) {
	rec, err := co.load(ctx, run)
	if errors.Is(err, store.ErrForeignRecord) {
		return true, nil
	}
	return rec != nil, err
}
