package notifier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/interlockhq/interlock/internal/fault"
	"github.com/interlockhq/interlock/internal/promreg"
	"github.com/interlockhq/interlock/internal/trace"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

// Options adjust a Notifier beyond its Config.
type Options struct {
	Logger *slog.Logger
	// Registry receives the notifier's metrics; default a new registry.
	Registry prometheus.Registerer
	// Sinks replace the configured sink of the same name (tests, custom
	// destinations).
	Sinks map[string]Sink
	// MaxInFlight bounds the notifications one sink has under way in this
	// process; default 16.
	MaxInFlight int
}

// Notifier fans suspensions out to sinks. Every sink has its own durable
// consumer on the suspension feed, so a slow or failing sink never delays
// another, and notifier processes with the same configuration share each
// sink's work.
type Notifier struct {
	client    *jetstream.Client
	cfg       *Config
	opts      Options
	log       *slog.Logger
	sinks     map[string]Sink
	routes    map[string][]*route // by sink, in configuration order
	personal  map[string]string   // by sink: the one person a personal sink reaches
	counts    *prometheus.CounterVec
	consumers jetstream.Consumers
	delivered *jetstream.Bucket
	// fault, in tests, abandons a delivery at a named point.
	fault fault.Hook
}

// Delivery outcomes counted by the interlock_notifications_total metric.
const (
	OutcomeDelivered    = "delivered"
	OutcomeRetried      = "retried"
	OutcomeDeadLettered = "dead_lettered"
	OutcomeDuplicate    = "duplicate"
	OutcomeUnmatched    = "unmatched"
	// OutcomeRefused counts messages on the feed no client published: an
	// answer the server sent to a suspension or notice subject for another
	// user (docs/security.md, "Answers the server sends for you").
	OutcomeRefused = "refused"
)

// New checks cfg and builds a notifier; Start runs it.
func New(c *jetstream.Client, cfg *Config, opts Options) (*Notifier, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 16
	}
	n := &Notifier{client: c, cfg: cfg, opts: opts, log: opts.Logger, sinks: map[string]Sink{},
		routes: map[string][]*route{}, personal: map[string]string{}}
	for _, sc := range cfg.Sinks {
		if sc.Personal != "" {
			n.personal[sc.Name] = sc.Personal
		}
		if s, ok := opts.Sinks[sc.Name]; ok {
			n.sinks[sc.Name] = s
			continue
		}
		s, err := newSink(sc, c)
		if err != nil {
			return nil, &ConfigError{File: "sink " + sc.Name, Line: sc.line, Msg: err.Error()}
		}
		n.sinks[sc.Name] = s
	}
	for _, rc := range cfg.Routes {
		prog, err := compileMatch(rc.Match)
		if err != nil {
			return nil, &ConfigError{File: "route " + rc.Name, Line: rc.line, Msg: err.Error()}
		}
		t, err := parseTemplates(rc.Templates)
		if err != nil {
			return nil, &ConfigError{File: "route " + rc.Name, Line: rc.line, Msg: err.Error()}
		}
		r := &route{cfg: rc, match: prog, templates: t}
		for _, s := range rc.Sinks {
			n.routes[s] = append(n.routes[s], r)
		}
	}
	n.counts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "interlock_notifications_total",
		Help: "Notifications by sink and outcome (delivered, retried, dead_lettered, duplicate, unmatched).",
	}, []string{"sink", "outcome"})
	var err error
	if n.counts, err = promreg.Register(opts.Registry, n.counts); err != nil {
		return nil, fmt.Errorf("notifier: %w", err)
	}
	return n, nil
}

// Count returns the number of notifications to sink with outcome.
func (n *Notifier) Count(sink, outcome string) float64 {
	m := &dtoCounter{}
	_ = n.counts.WithLabelValues(sink, outcome).Write(m.metric())
	return m.value()
}

// Start opens the deliveries bucket and consumes the feed with one durable
// consumer per sink. Through a client that has not provisioned, both must
// exist already (see Provision).
func (n *Notifier) Start(ctx context.Context) error {
	marks, err := n.bucket(ctx)
	if err != nil {
		return err
	}
	n.delivered = marks
	for _, s := range n.sinks {
		if a, ok := s.(interface{ attachClient(*jetstream.Client) }); ok {
			a.attachClient(n.client)
		}
	}
	for _, cc := range n.consumerConfigs() {
		name := strings.TrimPrefix(cc.Durable, "notifier_")
		sink := n.sinks[name]
		cons, err := n.client.Consume(ctx, cc, func(ctx context.Context, m *jetstream.Delivery) error { return n.handle(ctx, name, sink, m) })
		if err != nil {
			_ = n.consumers.Stop(context.WithoutCancel(ctx))
			return err
		}
		n.consumers.Add(cons)
	}
	return nil
}

// Provision creates the deliveries bucket and the consumer of every routed
// sink through a client that has provisioned: this is `interlock provision
// --notifier-config FILE`, after which notifiers need no right to create
// them.
func (n *Notifier) Provision(ctx context.Context) error {
	if _, err := n.bucket(ctx); err != nil {
		return err
	}
	for _, cc := range n.consumerConfigs() {
		if err := n.client.CreateConsumer(ctx, cc); err != nil {
			return err
		}
	}
	return nil
}

func (n *Notifier) bucket(ctx context.Context) (*jetstream.Bucket, error) {
	remember := n.cfg.Remember
	if remember == 0 {
		remember = 30 * 24 * time.Hour
	}
	return n.client.Bucket(ctx, "deliveries", "Interlock notifications delivered, by sink and pass", remember)
}

// consumerConfigs are the durable consumers of the sinks some route sends to.
func (n *Notifier) consumerConfigs() []jetstream.ConsumeConfig {
	var out []jetstream.ConsumeConfig
	for _, sc := range n.cfg.Sinks {
		if len(n.routes[sc.Name]) == 0 {
			continue // no route sends here
		}
		name := sc.Name
		out = append(out, jetstream.ConsumeConfig{
			Stream:         jetstream.StreamRuns,
			Durable:        "notifier_" + name,
			FilterSubjects: feedSubjects(n.client.Namespace()),
			MaxDeliver:     n.attempts(),
			AckWait:        n.cfg.AckWait,
			BackOff:        n.backoff(),
			MaxAckPending:  n.opts.MaxInFlight,
			Concurrency:    n.opts.MaxInFlight,
			DeliverNew:     true,
			StopCause:      ErrStopped,
			Logger:         n.log,
			OnDeadLetter:   func(m *jetstream.Delivery, reason error) { n.deadLettered(name, m, reason) },
		})
	}
	return out
}

// ErrStopped is the cause the contexts of the deliveries still under way
// are cancelled with when Stop's context ends before they finish.
var ErrStopped = errors.New("notifier stopped")

// Stop stops consuming and waits for the deliveries under way while ctx
// lasts; when ctx ends first, their contexts are cancelled (cause
// ErrStopped), the notices are redelivered later, and Stop returns an error
// wrapping ctx's. Stop before Start, or twice, is harmless.
func (n *Notifier) Stop(ctx context.Context) error {
	if err := n.consumers.Stop(ctx); err != nil {
		return fmt.Errorf("notifier: %w", err)
	}
	return nil
}

// Stopped returns a channel closed once Stop has returned.
func (n *Notifier) Stopped() <-chan struct{} { return n.consumers.Stopped() }

var errAbandoned = errors.New("abandoned by fault injection")

func (n *Notifier) crash(point string) bool { return n.fault.Crash(point, n.client.Close) }

// feedSubjects are what notifiers read: new suspensions, and the
// coordinator's notices about interrupts still waiting.
func feedSubjects(ns subjects.Namespace) []string {
	return []string{ns.All(subjects.KindSuspended), ns.All(subjects.KindReminder),
		ns.All(subjects.KindEscalated), ns.All(subjects.KindExpired)}
}

// Kind is what a notification is about: a new suspension, or one of the
// coordinator's notices about an interrupt still waiting.
type Kind string

// Notification kinds.
const (
	KindNew       Kind = "new"
	KindReminder  Kind = Kind(subjects.KindReminder)
	KindEscalated Kind = Kind(subjects.KindEscalated)
	KindExpired   Kind = Kind(subjects.KindExpired)
)

// kindOf is the kind of a notification about notice (the zero notice: a
// new suspension).
func kindOf(notice subjects.Notice) Kind {
	if notice.Kind == "" {
		return KindNew
	}
	return Kind(notice.Kind)
}

// deliveryKey names one notification: a sink told about one pass of a run
// (kind "new"), or a notice about it, named by its timer. It is the
// idempotency key receivers see and the key of the delivery record.
func deliveryKey(sink string, s *subjects.Suspension, kind Kind, timer string) string {
	key := sink + "." + s.RunID + "." + strconv.Itoa(s.Pass)
	if kind != KindNew {
		key += "." + timer
	}
	return key
}

// feedItem decodes a message of the feed into the suspension it is about
// and, for a notice, the notice (a new suspension gets the zero notice).
func (n *Notifier) feedItem(m *jetstream.Delivery) (subjects.Suspension, subjects.Notice, error) {
	a, err := n.client.Namespace().Parse(m.Subject)
	if err != nil {
		return subjects.Suspension{}, subjects.Notice{}, err
	}
	if a.Kind == subjects.KindSuspended {
		s, err := subjects.DecodeSuspension(m.Data)
		return s, subjects.Notice{}, err
	}
	notice, err := subjects.DecodeNotice(m.Data)
	if err != nil {
		return subjects.Suspension{}, subjects.Notice{}, err
	}
	return subjects.Suspension{PassRef: notice.PassRef, Interrupts: notice.Interrupts}, notice, nil
}

func (n *Notifier) handle(ctx context.Context, sinkName string, sink Sink, m *jetstream.Delivery) error {
	if err := jetstream.CheckPublished(m.Header); err != nil {
		// Neither an agent's suspension nor the coordinator's notice: not
		// notified, so it cannot take the delivery key of the real one.
		// The coordinator audits a refused suspension.
		n.counts.WithLabelValues(sinkName, OutcomeRefused).Inc()
		n.log.Warn("not notified: refused", "sink", sinkName, "subject", m.Subject, "error", err)
		return nil
	}
	s, notice, err := n.feedItem(m)
	kind := kindOf(notice)
	if err != nil {
		// The coordinator records and dead-letters malformed suspensions.
		n.log.Warn("not notified: malformed", "subject", m.Subject, "error", err)
		return nil
	}
	log := n.log.With("sink", sinkName, "run", s.RunID, "pass", s.Pass, "kind", kind)
	r, err := n.route(sinkName, &s, kind)
	if err != nil {
		log.Warn("route match failed; trying the next route", "error", err)
	}
	if r == nil {
		n.counts.WithLabelValues(sinkName, OutcomeUnmatched).Inc()
		return nil
	}
	key := deliveryKey(sinkName, &s, kind, notice.Timer)
	// Only the notifier's own mark: an answer the server stored under a
	// delivery key (any role holding a read can have one stored) would
	// otherwise tell no sink.
	done, err := n.delivered.Marked(ctx, key)
	if err != nil {
		return err
	}
	if done {
		n.counts.WithLabelValues(sinkName, OutcomeDuplicate).Inc()
		log.Debug("already delivered", "key", key)
		return nil
	}
	note, err := n.notification(ctx, key, r.cfg.Name, sinkName, &s, notice, int(m.Deliveries) >= n.attempts())
	if err != nil {
		// Links not to be had yet (the coordinator lags): asked again on
		// the next attempt; the last one sends without them.
		n.counts.WithLabelValues(sinkName, OutcomeRetried).Inc()
		log.Info("one-click links not available yet; retrying", "attempt", m.Deliveries, "error", err)
		return fmt.Errorf("sink %s: %w", sinkName, err)
	}
	note.TraceParent = trace.Child(m.Header.Get(trace.Header))
	if err := r.templates.render(note); err != nil {
		return jetstream.DeadLetter(fmt.Errorf("sink %s, route %s: %w", sinkName, r.cfg.Name, err))
	}
	if err := sink.Deliver(ctx, note); err != nil {
		var p *permanent
		if errors.As(err, &p) {
			return jetstream.DeadLetter(fmt.Errorf("sink %s: %w", sinkName, err))
		}
		var b *busy
		budget := slices.Max(n.backoff())
		if errors.As(err, &b) && b.after > budget {
			return jetstream.DeadLetter(fmt.Errorf("sink %s: %w; its Retry-After %s is beyond the retry budget of %s",
				sinkName, err, b.after, budget))
		}
		if int(m.Deliveries) < n.attempts() {
			n.counts.WithLabelValues(sinkName, OutcomeRetried).Inc()
		}
		if b != nil {
			return jetstream.RetryAfter(b.after, fmt.Errorf("sink %s: %w", sinkName, err))
		}
		return fmt.Errorf("sink %s: %w", sinkName, err)
	}
	if n.crash("after-accept") {
		return errAbandoned
	}
	record, _ := json.Marshal(map[string]any{"route": r.cfg.Name, "at": time.Now().UTC(), "attempt": m.Deliveries})
	if _, err := n.delivered.Mark(ctx, key, record); err != nil {
		return err
	}
	if n.crash("after-record") {
		return errAbandoned
	}
	n.counts.WithLabelValues(sinkName, OutcomeDelivered).Inc()
	log.Info("notified", "route", r.cfg.Name, "attempt", m.Deliveries)
	return nil
}

// notification builds what sink is sent about s (a new suspension, or the
// subject of notice), before its templates are rendered. Unless last (the
// last delivery attempt), it fails with errLinksUnavailable when the
// gateway could not say yet whether to make a link it asked for.
func (n *Notifier) notification(ctx context.Context, key, route, sink string, s *subjects.Suspension, notice subjects.Notice, last bool) (*Notification, error) {
	note := &Notification{Key: key, Route: route, Sink: sink, Kind: kindOf(notice), Detail: notice.Detail, Suspension: *s}
	if note.Kind != KindNew {
		note.Notice = &NoticeRef{Seq: notice.Seq, Timer: notice.Timer, At: notice.At, Status: notice.Status}
	}
	note.Headline = headline(note.Kind, s, note.Notice, time.Now())
	var unavailable error
	if note.Open() {
		note.Decide = decideHints(n.cfg, s, n.personal[sink], func(in subjects.Interrupt) []LinkPair {
			if unavailable != nil {
				return nil // retried anyway: ask no more
			}
			pairs, err := n.links(ctx, sink, s.RunID, in)
			if err != nil && !last {
				unavailable = err
			} else if err != nil {
				n.log.Warn("no one-click links on the last attempt", "sink", sink, "run", s.RunID,
					"interrupt", in.ID, "error", err)
			}
			return pairs
		})
	} else {
		note.Decide = closedHints(s)
	}
	if unavailable != nil {
		return nil, unavailable
	}
	for i := range note.Decide {
		var tally *subjects.Tally
		if t, ok := notice.Tallies[note.Decide[i].ID]; ok {
			tally = &t
		}
		note.Decide[i].Quorum = quorum(note.Decide[i].Interrupt, note.Kind, tally)
	}
	return note, nil
}

// errLinksUnavailable is why a notification waits for a later attempt:
// the gateway's link service did not answer, or answered unavailable (a
// run or interrupt the coordinator has not recorded yet, the record
// unreadable).
var errLinksUnavailable = errors.New("one-click links unavailable")

// mintTimeout bounds the wait for the gateway's links.
const mintTimeout = 5 * time.Second

// links asks the gateway's link service for the one-click links of in,
// for sink. The notifier holds no secret and names no approver: the
// gateway decides whom the sink reaches and whether they may decide. When
// it refuses, the message goes without them: the inbox link and the
// commands still decide; so it does when no gateway serves the link
// service at all (no responders). When a request gets no answer in time,
// or the answer is unavailable, the error wraps errLinksUnavailable: ask
// again later.
func (n *Notifier) links(ctx context.Context, sink, run string, in subjects.Interrupt) ([]LinkPair, error) {
	base := strings.TrimRight(n.cfg.GatewayURL, "/")
	req, _ := json.Marshal(subjects.LinkRequest{Version: subjects.Version, RunID: run, InterruptID: in.ID, Sink: sink})
	ctx, cancel := context.WithTimeout(ctx, mintTimeout)
	defer cancel()
	data, err := n.client.Request(ctx, n.client.Namespace().LinkMint(), req)
	if errors.Is(err, jetstream.ErrNoStream) {
		// No responders: no gateway serves links in this deployment (none
		// runs, or none has a link secret), so none will on a retry either.
		n.log.Warn("no one-click links: no gateway serves the link service", "sink", sink, "run", run,
			"interrupt", in.ID, "error", err)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: interrupt %s: the gateway's link service did not answer: %w",
			errLinksUnavailable, in.ID, err)
	}
	var reply subjects.LinkReply
	if err := json.Unmarshal(data, &reply); err != nil || reply.Code != "" {
		if err == nil && reply.Code == subjects.CodeUnavailable {
			return nil, fmt.Errorf("%w: interrupt %s: %s", errLinksUnavailable, in.ID, reply.Detail)
		}
		n.log.Info("no one-click links", "sink", sink, "run", run, "interrupt", in.ID, "code", reply.Code,
			"detail", reply.Detail, "error", err)
		return nil, nil
	}
	out := make([]LinkPair, 0, len(reply.Links))
	for _, l := range reply.Links {
		out = append(out, LinkPair{Approver: l.Approver, ApproveURL: base + "/l/" + l.Approve, DenyURL: base + "/l/" + l.Deny})
	}
	return out, nil
}

func (n *Notifier) attempts() int {
	if n.cfg.Attempts == 0 {
		return 5
	}
	return n.cfg.Attempts
}

// backoff is the delay before each retry; its longest step is also the
// longest Retry-After a sink may ask for.
func (n *Notifier) backoff() []time.Duration {
	if len(n.cfg.Backoff) == 0 {
		return []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute}
	}
	return n.cfg.Backoff
}

// route returns the first route that sends s to sink.
func (n *Notifier) route(sink string, s *subjects.Suspension, kind Kind) (*route, error) {
	env := envOf(s, time.Now())
	env.Kind = string(kind)
	var errs []error
	for _, r := range n.routes[sink] {
		ok, err := r.matches(env)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			return r, errors.Join(errs...)
		}
	}
	return nil, errors.Join(errs...)
}

// deadLettered records a notification a sink never accepted.
func (n *Notifier) deadLettered(sink string, m *jetstream.Delivery, reason error) {
	n.counts.WithLabelValues(sink, OutcomeDeadLettered).Inc()
	a, err := n.client.Namespace().Parse(m.Subject)
	if err != nil {
		return
	}
	subject, err := n.client.Namespace().Observed(a.Run, subjects.EventNotificationFailed)
	if err != nil {
		return
	}
	ev := subjects.Event{Version: subjects.Version, Type: subjects.EventNotificationFailed, RunID: a.Run,
		Agent: a.Agent, At: time.Now().UTC(), Sink: sink, Attempts: int(m.Deliveries), Detail: reason.Error(),
		Subject: m.Subject}
	if s, err := subjects.DecodeSuspension(m.Data); err == nil {
		ev.Pass = s.Pass
		for _, in := range s.Interrupts {
			ev.InterruptIDs = append(ev.InterruptIDs, in.ID)
		}
	}
	data, _ := json.Marshal(ev)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A message id of its own, nobody else's to predict: the gateway
	// publishes observations into the same stream.
	if _, err := n.client.Publish(ctx, subject, data, uuid.NewString(), nil); err != nil {
		n.log.Error("notification_failed event not published", "sink", sink, "run", a.Run, "error", err)
	}
}
