package jetstream

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/interlockhq/interlock/subjects"
)

// Storage selects where streams keep their messages.
type Storage string

// Storage kinds.
const (
	FileStorage   Storage = "file"
	MemoryStorage Storage = "memory"
)

// Config is what Interlock's streams and bucket are.
type Config struct {
	// Prefix of every subject, stream and bucket; default "interlock".
	Prefix string
	// Replicas of every stream and the bucket; default 1 (use 3 on a cluster).
	Replicas int
	// Storage of every stream; default FileStorage.
	Storage Storage
	// MaxAge bounds how long the runs, decisions and dead-letter streams keep
	// messages; zero keeps them until deleted by hand. The events stream
	// keeps EventsMaxAge, default forever: it is the audit trail.
	MaxAge       time.Duration
	EventsMaxAge time.Duration
	// DuplicateWindow is how long Nats-Msg-Id deduplication remembers an id;
	// default 10 minutes. It must outlast a consumer's redelivery delay.
	DuplicateWindow time.Duration
	// Timeout bounds each request to the server when the context has no
	// deadline; default 5 seconds.
	Timeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = subjects.DefaultPrefix
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Storage == "" {
		c.Storage = FileStorage
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 10 * time.Minute
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	return c
}

// Client is a connection to NATS with Interlock's namespace.
type Client struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	cfg   Config
	ns    subjects.Namespace
	owned bool

	mu          sync.Mutex
	provisioner bool
	// replicas is what this client creates streams and buckets with once
	// it has provisioned: its Config's, or more when Interlock's streams
	// already have more.
	replicas int
	// streams caches stream handles by name, for reads that would
	// otherwise ask for the stream's info every time.
	streams sync.Map
}

// DialConfig says how to reach a NATS server.
type DialConfig struct {
	// URL is one or more comma-separated server URLs; default nats.DefaultURL.
	URL string
	// CredsFile is a NATS credentials file (JWT and NKey seed).
	CredsFile string
	// User and Password authenticate with a user name and password (the
	// per-role users of deploy/nats/auth.conf) when set.
	User, Password string
	// TLS, when set, is used for the connection.
	TLS *tls.Config
	// Name identifies the connection in server monitoring.
	Name string
	// InboxPrefix replaces "_INBOX" for this connection's replies (the
	// JetStream API's and the coordinator's verdicts); with per-user
	// permissions each user may subscribe only under its own prefix,
	// subjects.InboxPrefix(user). Empty keeps nats.go's default.
	InboxPrefix string
}

// Redact returns one or more comma-separated server URLs with any password
// (or token: a user name alone is one in a NATS URL) replaced by "xxxxx",
// for logs and error messages.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		switch {
		case err != nil && strings.Contains(p, "@"):
			parts[i] = "(unparsable URL)"
		case err != nil || u.User == nil:
		case hasPassword(u.User):
			parts[i] = u.Redacted()
		default:
			u.User = url.User("xxxxx")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

func hasPassword(u *url.Userinfo) bool {
	_, ok := u.Password()
	return ok
}

// checkPasswords refuses a named user with an empty password, in
// DialConfig (unless a credentials file authenticates instead) or in any
// of the comma-separated urls, with an error matching ErrEmptyPassword. (A
// user name alone in a URL is a token, not a user.)
func checkPasswords(urls string, dc DialConfig) error {
	if dc.User != "" && dc.Password == "" && dc.CredsFile == "" {
		return fmt.Errorf("NATS user %q has an %w: set NATS_PASSWORD (or use a credentials file)", dc.User, ErrEmptyPassword)
	}
	for _, p := range strings.Split(urls, ",") {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if pw, ok := u.User.Password(); ok && pw == "" {
			return fmt.Errorf("NATS user %q in the URL %s has an %w", u.User.Username(), Redact(p), ErrEmptyPassword)
		}
	}
	return nil
}

// Dial connects to NATS and returns a Client that closes the connection on
// Close. A named user with an empty password is refused before any
// connection is made (ErrEmptyPassword).
func Dial(ctx context.Context, dc DialConfig, cfg Config) (*Client, error) {
	addr := dc.URL
	if addr == "" {
		addr = nats.DefaultURL
	}
	if err := checkPasswords(addr, dc); err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.Name(dc.Name), nats.MaxReconnects(-1)}
	if dc.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(dc.InboxPrefix))
	}
	if dc.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(dc.CredsFile))
	}
	if dc.User != "" {
		opts = append(opts, nats.UserInfo(dc.User, dc.Password))
	}
	if dc.TLS != nil {
		opts = append(opts, nats.Secure(dc.TLS))
	}
	if d, ok := ctx.Deadline(); ok {
		opts = append(opts, nats.Timeout(time.Until(d)))
	}
	nc, err := nats.Connect(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", Redact(addr), translate(err))
	}
	c, err := newClient(nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.owned = true
	return c, nil
}

func newClient(nc *nats.Conn, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	ns, err := subjects.New(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(cfg.Timeout))
	if err != nil {
		return nil, translate(err)
	}
	return &Client{nc: nc, js: js, cfg: cfg, ns: ns}, nil
}

// Namespace returns the client's subjects.
func (c *Client) Namespace() subjects.Namespace { return c.ns }

// Config returns the client's configuration with defaults filled in.
func (c *Client) Config() Config { return c.cfg }

// MaxPayload is the largest message, headers and body, the server the
// client is connected to accepts (its max_payload, 1 MiB by default). It
// can change when the client reconnects to a server configured otherwise.
func (c *Client) MaxPayload() int64 { return c.nc.MaxPayload() }

// Close closes the connection at once, without draining: messages being
// handled are not acked and will be redelivered.
func (c *Client) Close() {
	if c.owned {
		c.nc.Close()
	}
}

// Drain lets subscriptions finish their buffered messages, then closes.
func (c *Client) Drain() error {
	if !c.owned {
		return nil
	}
	return translate(c.nc.Drain())
}

// Stream is one of Interlock's streams.
type Stream string

// Interlock's streams.
const (
	StreamWork      Stream = "WORK"
	StreamRuns      Stream = "RUNS"
	StreamDecisions Stream = "DECISIONS"
	StreamEvents    Stream = "EVENTS"
	StreamDLQ       Stream = "DLQ"
	StreamTimers    Stream = "TIMERS"
	// StreamAGUI keeps the AG-UI events run bodies emit, for the bridge.
	StreamAGUI Stream = "AGUI"
	// StreamObserved holds what the notifier and the gateway observe
	// until the coordinator has recorded it in the events stream, which
	// only the coordinator writes.
	StreamObserved Stream = "OBSERVED"
)

// Streams are all of Interlock's streams.
var Streams = []Stream{StreamWork, StreamRuns, StreamDecisions, StreamEvents, StreamDLQ, StreamTimers, StreamAGUI, StreamObserved}

// StreamName is the server-side name of s under the client's prefix.
func (c *Client) StreamName(s Stream) string {
	return strings.ToUpper(strings.ReplaceAll(c.cfg.Prefix, ".", "_")) + "_" + string(s)
}

func (c *Client) streamConfigs(replicas int) []jetstream.StreamConfig {
	storage := c.storage()
	base := func(s Stream, maxAge time.Duration, subjects ...string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:       c.StreamName(s),
			Subjects:   subjects,
			Storage:    storage,
			Replicas:   replicas,
			MaxAge:     maxAge,
			Duplicates: c.cfg.DuplicateWindow,
			Discard:    jetstream.DiscardOld,
		}
	}
	ns := c.ns
	work := base(StreamWork, 0, ns.All(subjects.KindWork), ns.All(subjects.KindStart))
	work.Retention = jetstream.WorkQueuePolicy
	// Timers: schedules wait in the stream until they fire; fired timers are
	// deleted once the coordinator acks them. Never aged out.
	timers := base(StreamTimers, 0, ns.All(subjects.KindTimers))
	timers.Retention = jetstream.WorkQueuePolicy
	timers.AllowMsgSchedules = true
	// Observations wait until the coordinator has recorded them.
	observed := base(StreamObserved, c.cfg.MaxAge, ns.All(subjects.KindObserved))
	observed.Retention = jetstream.WorkQueuePolicy
	// The server allows rollups with schedules (a schedule replaces the
	// one before it); saying so keeps the topology check exact.
	timers.AllowRollup = true
	// Decisions and the audit trail: nobody deletes or purges them, not
	// even an admin; they leave only by their retention.
	decisions := base(StreamDecisions, c.cfg.MaxAge, ns.All(subjects.KindResume))
	events := base(StreamEvents, c.cfg.EventsMaxAge, ns.All(subjects.KindEvents))
	for _, sc := range []*jetstream.StreamConfig{&decisions, &events} {
		sc.DenyDelete, sc.DenyPurge = true, true
	}
	// Events, AG-UI events and dead letters are read in batches
	// (Messages), with direct gets.
	agui := base(StreamAGUI, c.cfg.MaxAge, ns.All(subjects.KindAGUI))
	dlq := base(StreamDLQ, c.cfg.MaxAge, ns.All(subjects.KindDLQ))
	// The runs stream too: a worker reads the last message on its own
	// agent's subjects of a run (has this pass reported?) with a direct get
	// naming the subject, which per-agent permissions can confine.
	runs := base(StreamRuns, c.cfg.MaxAge, ns.All(subjects.KindSuspended), ns.All(subjects.KindCompleted), ns.All(subjects.KindFailed),
		ns.All(subjects.KindReminder), ns.All(subjects.KindEscalated), ns.All(subjects.KindExpired))
	for _, sc := range []*jetstream.StreamConfig{&events, &agui, &dlq, &runs} {
		sc.AllowDirect = true
	}
	return []jetstream.StreamConfig{
		work,
		timers,
		runs,
		decisions,
		events,
		dlq,
		agui,
		observed,
	}
}

// ErrRetention means the audit trail would be deleted before the runs it
// describes.
var ErrRetention = errors.New("events retention shorter than runs retention")

// Provision creates Interlock's streams and KV buckets, or brings existing
// ones up to the client's Config without ever lowering what is there:
// replicas, retention and the duplicate window are raised, never reduced,
// and whatever else an operator set is kept. The decisions and events
// streams deny message deletes and purges (the server allows that to be
// set, never unset). What is missing is created with the Config's replicas
// or, when Interlock's existing streams have more, with as many as they
// have. It is idempotent, and safe to run from any number of processes at
// once: a provisioner that loses a race to create something, or finds a
// cluster still forming or electing, reads again and converges, until ctx
// ends (6 times Config.Timeout when ctx has no deadline).
//
// Only the roles that provision call it: `interlock provision` and `serve`
// (the admin and coordinator users). A client that has provisioned also
// creates the consumers and buckets it uses; any other client binds to the
// ones that exist and fails with ErrNotProvisioned when one is missing, so
// agents, notifiers and gateways need no rights to change streams.
func (c *Client) Provision(ctx context.Context) error {
	if c.cfg.EventsMaxAge != 0 && (c.cfg.MaxAge == 0 || c.cfg.EventsMaxAge < c.cfg.MaxAge) {
		return fmt.Errorf("%w: events kept %s, runs kept %s: audit events must outlive the runs",
			ErrRetention, c.cfg.EventsMaxAge, orForever(c.cfg.MaxAge))
	}
	replicas, err := c.existingReplicas(ctx)
	if err != nil {
		return fmt.Errorf("provision: %w", translate(err))
	}
	replicas = max(replicas, c.cfg.Replicas)
	for _, sc := range c.streamConfigs(replicas) {
		if err := c.provisionStream(ctx, sc); err != nil {
			return fmt.Errorf("provision stream %s: %w", sc.Name, translate(err))
		}
	}
	for _, b := range c.coreBuckets(replicas) {
		if _, err := c.provisionBucket(ctx, b); err != nil {
			return fmt.Errorf("provision bucket %s: %w", b.Bucket, translate(err))
		}
	}
	if err := c.provisionKeys(ctx, replicas); err != nil {
		return err
	}
	c.mu.Lock()
	c.provisioner = true
	c.replicas = replicas
	c.mu.Unlock()
	return nil
}

// existingReplicas is the most replicas any of Interlock's streams has
// (0 when none exists), so that a client configured with fewer (the
// default, one) creates what is missing with as many as the rest.
func (c *Client) existingReplicas(ctx context.Context) (int, error) {
	most := 0
	for _, sc := range c.streamConfigs(0) {
		err := c.converge(ctx, func(ctx context.Context) error {
			st, err := c.js.Stream(ctx, sc.Name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil
			}
			if err == nil {
				most = max(most, st.CachedInfo().Config.Replicas)
			}
			return err
		})
		if err != nil {
			return 0, err
		}
	}
	return most, nil
}

// provisionedReplicas is what the client creates streams and buckets with.
func (c *Client) provisionedReplicas() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.replicas, c.cfg.Replicas)
}

// Provisioner reports whether this client has provisioned, and so creates
// the consumers and buckets it uses instead of binding to existing ones.
func (c *Client) Provisioner() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.provisioner
}

func (c *Client) storage() jetstream.StorageType {
	if c.cfg.Storage == MemoryStorage {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// provisionStream creates want, or raises an existing stream to it.
func (c *Client) provisionStream(ctx context.Context, want jetstream.StreamConfig) error {
	return c.ensureStream(ctx, want.Name, func(ctx context.Context) error {
		_, err := c.js.CreateStream(ctx, want)
		return err
	}, func(have jetstream.StreamConfig) jetstream.StreamConfig { return raiseStream(have, want) })
}

// ensureStream creates stream name with create when it does not exist, or
// updates it to raise(its config) when that differs; converging with other
// provisioners (an "already in use" from create reads it again).
func (c *Client) ensureStream(ctx context.Context, name string, create func(context.Context) error,
	raise func(jetstream.StreamConfig) jetstream.StreamConfig) error {
	return c.converge(ctx, func(ctx context.Context) error {
		st, err := c.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return create(ctx)
		}
		if err != nil {
			return err
		}
		have := st.CachedInfo().Config
		next := raise(have)
		if reflect.DeepEqual(next, have) {
			return nil
		}
		_, err = c.js.UpdateStream(ctx, next)
		return err
	})
}

// provisionAttempt bounds one attempt of a provisioning step, so that a
// request lost while a cluster forms is asked again instead of waited for.
const provisionAttempt = 3 * time.Second

// converge runs step until it succeeds or fails for good. Another
// provisioner creating the same thing at the same moment ("already in
// use"), a cluster still forming or electing (ErrUnavailable) and an
// attempt that timed out are retried, each attempt reading the server's
// state afresh, until ctx ends (6 times the client's Timeout when it has no
// deadline).
func (c *Client) converge(ctx context.Context, step func(context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 6*c.cfg.Timeout)
		defer cancel()
	}
	return retry(ctx, min(provisionAttempt, c.cfg.Timeout), racing, step)
}

// RetryAttempt bounds one attempt of RetryUnavailable.
const RetryAttempt = 2 * time.Second

// RetryUnavailable runs op until it succeeds, fails with an error other
// than ErrUnavailable or ErrTimeout, or ctx ends; each attempt is bounded
// by RetryAttempt and they are spaced by a short backoff (25 ms doubling
// up to 500 ms). It is for writes that are safe to repeat (deduplicated by
// message id) through a leader election.
func RetryUnavailable(ctx context.Context, op func(context.Context) error) error {
	return retry(ctx, RetryAttempt, func(err error) bool {
		return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTimeout)
	}, op)
}

// retry is the loop of converge and RetryUnavailable.
func retry(ctx context.Context, attempt time.Duration, retryable func(error) bool, op func(context.Context) error) error {
	backoff := 25 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := op(actx)
		cancel()
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return err
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// racing reports whether a provisioning step failed because of a
// concurrent provisioner or a cluster forming, not for good. A forming
// cluster's meta leader can also answer "insufficient resources" (10023)
// before it has heard every peer's resources; that too is retried within
// the step's deadline, after which the error stands.
func racing(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || errors.Is(err, jetstream.ErrBucketExists) ||
		errors.Is(err, jetstream.ErrConsumerExists) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, ErrUnavailable) || errors.Is(translate(err), ErrUnavailable) ||
		(errors.As(err, &api) && api.ErrorCode == jsInsufficientResources)
}

// jsInsufficientResources is JetStream's error code for "insufficient
// resources".
const jsInsufficientResources = 10023

// raiseStream is have with want's subjects and features, and the larger of
// each limit Interlock sets. Everything else of have is kept.
func raiseStream(have, want jetstream.StreamConfig) jetstream.StreamConfig {
	next := have
	next.Subjects = want.Subjects
	next.Replicas = max(have.Replicas, want.Replicas)
	next.MaxAge = longer(have.MaxAge, want.MaxAge)
	next.Duplicates = max(have.Duplicates, want.Duplicates)
	next.DenyDelete = have.DenyDelete || want.DenyDelete
	next.DenyPurge = have.DenyPurge || want.DenyPurge
	next.AllowMsgSchedules = have.AllowMsgSchedules || want.AllowMsgSchedules
	next.AllowDirect = have.AllowDirect || want.AllowDirect
	return next
}

// longer is the longer of two retention ages, zero meaning forever.
func longer(a, b time.Duration) time.Duration {
	if a == 0 || b == 0 {
		return 0
	}
	return max(a, b)
}

// provisionBucket creates the bucket, or raises an existing one's replicas
// and TTL to cfg's; it never lowers them and keeps whatever else an
// operator set (history, size limits). The pending index's bucket also
// allows message TTLs, so that its delete markers expire (KVDeleteMsg) and
// its count can be read from the stream's state; that is raised on an
// existing bucket, never taken away, and every raise of it carries it, so
// provisioners running at once never undo each other's. No bucket allows
// rollups (nats.go creates buckets with them, for KeyValue.Purge, which
// Interlock does not use): with them, whoever may put one key could erase
// every key with a "Nats-Rollup: all" header.
func (c *Client) provisionBucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	msgTTL := cfg.Bucket == c.BucketName(PendingBucket)
	raise := func(have jetstream.StreamConfig) jetstream.StreamConfig {
		next := have
		next.Replicas = max(have.Replicas, cfg.Replicas)
		next.MaxAge = longer(have.MaxAge, cfg.TTL)
		next.AllowMsgTTL = have.AllowMsgTTL || msgTTL
		next.AllowRollup = false
		if msgTTL && !have.AllowMsgTTL {
			// Its delete markers so far never expire: clearOldMarkers
			// removes them.
			next.Metadata = maps.Clone(have.Metadata)
			if next.Metadata == nil {
				next.Metadata = map[string]string{}
			}
			next.Metadata[oldMarkers] = "1"
		}
		return next
	}
	create := func(ctx context.Context) error {
		_, err := c.js.CreateKeyValue(ctx, cfg)
		return err
	}
	err := c.ensureStream(ctx, "KV_"+cfg.Bucket, create, raise)
	if err == nil {
		// A bucket just created lacks what KeyValueConfig cannot say.
		err = c.ensureStream(ctx, "KV_"+cfg.Bucket, create, raise)
	}
	if err != nil {
		return nil, err
	}
	var kv jetstream.KeyValue
	err = c.converge(ctx, func(ctx context.Context) error {
		kv, err = c.js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			// ensureStream has just seen or made it: in a cluster, the
			// server that answered has not applied its creation yet.
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	})
	if err == nil && msgTTL {
		c.clearOldMarkers(ctx, kv, "KV_"+cfg.Bucket)
	}
	return kv, err
}

// oldMarkers is the pending bucket's stream metadata key that says it may
// still hold delete markers from before message TTLs were allowed.
const oldMarkers = "interlock_old_markers"

// clearOldMarkers removes the delete markers a pending bucket provisioned
// by an older Interlock holds: written before message TTLs were allowed,
// they never expire, and the count and the listing would include them. It
// needs the right to purge (admin's; the coordinator's shipped permissions
// deny it): without it the markers stay, marked, until `interlock
// provision` runs as admin, and nothing fails.
func (c *Client) clearOldMarkers(ctx context.Context, kv jetstream.KeyValue, stream string) {
	st, err := c.js.Stream(ctx, stream)
	if err != nil || st.CachedInfo().Config.Metadata[oldMarkers] == "" {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if kv.PurgeDeletes(pctx, jetstream.DeleteMarkersOlderThan(-1)) != nil {
		return
	}
	next := st.CachedInfo().Config
	next.Metadata = maps.Clone(next.Metadata)
	delete(next.Metadata, oldMarkers)
	_, _ = c.js.UpdateStream(pctx, next)
}

// RequirePendingTTL fails with ErrNotProvisioned when the pending index's
// bucket does not allow message TTLs (it was provisioned by an older
// Interlock): a coordinator would then fail every removal from the index.
func (c *Client) RequirePendingTTL(ctx context.Context) error {
	name := "KV_" + c.BucketName(PendingBucket)
	st, err := c.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w: bucket %s does not exist", ErrNotProvisioned, c.BucketName(PendingBucket))
	}
	if err != nil {
		return fmt.Errorf("read bucket %s: %w", c.BucketName(PendingBucket), translate(err))
	}
	if !st.CachedInfo().Config.AllowMsgTTL {
		return fmt.Errorf("%w: bucket %s does not allow message TTLs (provisioned by an older Interlock)",
			ErrNotProvisioned, c.BucketName(PendingBucket))
	}
	return nil
}

// PendingBucket names the index of interrupts waiting for a decision; the
// coordinator keeps it in step with the run records.
const PendingBucket = "pending"

// RunsBucket names the bucket of run records, one per run, written only by
// coordinators with compare-and-set.
const RunsBucket = "runs"

// OpenAIAgentsBucket names the bucket where the TypeScript SDK's OpenAI
// Agents adapter keeps a run's RunState while it waits on approvals, under
// keys <agent>.<run>.<stop> that only the agent's own NATS user may put and
// read (see `interlock auth`). Nothing in Go reads it; `interlock provision`
// creates it so that agents, which may not create buckets, can use it.
const OpenAIAgentsBucket = "openai_agents"

// KVPutMsg is the message that stores value under key in bucket (a name
// given to BucketName), for PublishAll.
func (c *Client) KVPutMsg(bucket, key string, value []byte, msgID string) OutMsg {
	return OutMsg{Subject: "$KV." + c.BucketName(bucket) + "." + key, Data: value, MsgID: msgID}
}

// KVDeleteMsg is the message that deletes key from bucket, for PublishAll.
// Its marker expires after a second (the bucket's stream must allow message
// TTLs, see Provision), so the bucket's stream then holds only the keys
// that are there and Bucket.Count counts them.
func (c *Client) KVDeleteMsg(bucket, key string) OutMsg {
	return OutMsg{Subject: "$KV." + c.BucketName(bucket) + "." + key,
		Header: Header{kvOperation: {kvDelete}, markerTTLHeader: {"1s"}}}
}

// markerTTLHeader is JetStream's per-message TTL (nats-server 2.11+).
const markerTTLHeader = "Nats-TTL"

func orForever(d time.Duration) string {
	if d == 0 {
		return "forever"
	}
	return d.String()
}

// Header is a message's headers.
type Header map[string][]string

// Get returns the first value of key, or "".
func (h Header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Headers Interlock sets on messages.
const (
	// HeaderMsgID is JetStream's dedup key.
	HeaderMsgID = jetstream.MsgIDHeader
	// HeaderReplyTo asks the coordinator to send the decision's verdict to
	// this subject as well as to the events stream.
	HeaderReplyTo = "Interlock-Reply-To"
	// HeaderVia names the path a decision came by, for the audit trail.
	HeaderVia = "Interlock-Via"
	// HeaderEmitSettled, on an AG-UI event a worker stored, is how many of
	// its pass's Emit calls came before the pass's first undecided
	// interrupt (up to and including this event): a replay makes those
	// same calls first, in order.
	HeaderEmitSettled = "Interlock-Emit-Settled"
	// HeaderEmitTentative, on an AG-UI event a worker stored, lists the
	// digests (comma-separated) of the run's kept events that no replay
	// has placed yet: those emitted after an undecided interrupt, which a
	// replay may emit again elsewhere (after acting on that interrupt).
	HeaderEmitTentative = "Interlock-Emit-Tentative"
	// Dead-letter headers: why the message failed and where it came from.
	HeaderDLQReason     = "Interlock-Dlq-Reason"
	HeaderDLQSubject    = "Interlock-Dlq-Subject"
	HeaderDLQStream     = "Interlock-Dlq-Stream"
	HeaderDLQSequence   = "Interlock-Dlq-Sequence"
	HeaderDLQDeliveries = "Interlock-Dlq-Deliveries"
	HeaderDLQConsumer   = "Interlock-Dlq-Consumer"
)

// PubAck is the server's acknowledgement of a stored message.
type PubAck struct {
	Stream    string
	Sequence  uint64
	Duplicate bool
}

// Publish stores data on subject, deduplicated by msgID when it is not empty,
// and returns once the server has stored it.
func (c *Client) Publish(ctx context.Context, subject string, data []byte, msgID string, h Header) (PubAck, error) {
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header(h)}
	if msgID != "" {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header.Set(HeaderMsgID, msgID)
	}
	ack, err := c.js.PublishMsg(ctx, m)
	if err != nil {
		return PubAck{}, fmt.Errorf("publish %s: %w", subject, c.refused(subject, err))
	}
	return PubAck{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// refused is err translated, or ErrPermission when the server refused this
// user a publish on subject: it drops the message and says so only
// asynchronously, so the publish itself just times out.
func (c *Client) refused(subject string, err error) error {
	last := c.nc.LastError()
	if last != nil && errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), `"`+subject+`"`) {
		return fmt.Errorf("%w: the server refused this user a publish on %s (%s)", ErrPermission, subject, last.Error())
	}
	return c.written(subject, err)
}

// OutMsg is one message for PublishAll.
type OutMsg struct {
	Subject string
	Data    []byte
	// MsgID deduplicates, when set.
	MsgID  string
	Header Header
}

// ScheduleMsg is the message that stores data on subject as a durable
// timer the server publishes to target at at (whole seconds), for
// PublishAll.
func ScheduleMsg(subject, target string, at time.Time, data []byte, msgID string) OutMsg {
	return OutMsg{Subject: subject, Data: data, MsgID: msgID, Header: Header{
		"Nats-Schedule": {"@at " + at.UTC().Format(time.RFC3339)}, "Nats-Schedule-Target": {target}}}
}

// PublishAll stores every message, sending them together rather than one
// round trip after another, and returns once the server has stored all of
// them (or the first error).
func (c *Client) PublishAll(ctx context.Context, msgs ...OutMsg) error {
	if len(msgs) == 1 {
		m := msgs[0]
		_, err := c.Publish(ctx, m.Subject, m.Data, m.MsgID, m.Header)
		return err
	}
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		nm := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
		for k, v := range m.Header {
			nm.Header[k] = v
		}
		if m.MsgID != "" {
			nm.Header.Set(HeaderMsgID, m.MsgID)
		}
		f, err := c.js.PublishMsgAsync(nm)
		if err != nil {
			return fmt.Errorf("publish %s: %w", m.Subject, c.written(m.Subject, err))
		}
		futures = append(futures, f)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish %s: %w", msgs[i].Subject, c.written(msgs[i].Subject, err))
		case <-ctx.Done():
			return fmt.Errorf("publish %s: %w", msgs[i].Subject, translate(ctx.Err()))
		}
	}
	return nil
}

// Notify sends data on subject without storing it (core NATS); for replies.
func (c *Client) Notify(subject string, data []byte) error {
	return translate(c.nc.Publish(subject, data))
}

// NotifyMsg sends data with headers on subject without storing it (core
// NATS) and returns once the server has it, so the caller may count it as
// handed over.
func (c *Client) NotifyMsg(ctx context.Context, subject string, data []byte, h Header) error {
	if err := c.nc.PublishMsg(&nats.Msg{Subject: subject, Data: data, Header: nats.Header(h)}); err != nil {
		return translate(err)
	}
	return translate(c.nc.FlushWithContext(ctx))
}

// Subscription is a core NATS subscription.
type Subscription struct{ sub *nats.Subscription }

// Unsubscribe stops the subscription.
func (s *Subscription) Unsubscribe() { _ = s.sub.Unsubscribe() }

// Subscribe calls fn for every message on subject (core NATS, not stored).
func (c *Client) Subscribe(subject string, fn func(subject string, data []byte)) (*Subscription, error) {
	sub, err := c.nc.Subscribe(subject, func(m *nats.Msg) { fn(m.Subject, m.Data) })
	if err != nil {
		return nil, translate(err)
	}
	// While the connection is being re-established (a node died) the flush
	// fails, but the subscription stands: nats.go subscribes again on
	// reconnect, before it sends anything published meanwhile.
	if err := c.nc.Flush(); err != nil && (c.nc.IsClosed() || !c.nc.IsReconnecting()) {
		_ = sub.Unsubscribe()
		return nil, translate(err)
	}
	return &Subscription{sub: sub}, nil
}

// NewInbox returns a fresh subject for replies.
func (c *Client) NewInbox() string { return c.nc.NewInbox() }

// StoredMsg is a message read back from a stream.
type StoredMsg struct {
	Subject  string
	Sequence uint64
	Header   Header
	Data     []byte
	Time     time.Time
}

// LastMsg returns the last message of stream s on subject, which may contain
// wildcards. It returns ErrNotFound when there is none.
func (c *Client) LastMsg(ctx context.Context, s Stream, subject string) (StoredMsg, error) {
	st, err := c.stream(ctx, s)
	if err != nil {
		return StoredMsg{}, err
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return StoredMsg{}, translate(err)
	}
	return StoredMsg{Subject: m.Subject, Sequence: m.Sequence, Header: Header(m.Header), Data: m.Data, Time: m.Time}, nil
}

// DirectLast returns the last message of stream s (which allows direct
// gets) on subject, which may contain wildcards, with one direct get whose
// API subject names the subject: $JS.API.DIRECT.GET.<stream>.<subject>. So
// NATS permissions can confine a user's reads to subjects of its own (an
// agent to <prefix>.*.<agent>.*), and it needs no STREAM.INFO. It returns
// ErrNotFound when there is none.
func (c *Client) DirectLast(ctx context.Context, s Stream, subject string) (StoredMsg, error) {
	name := c.StreamName(s)
	api := "$JS.API.DIRECT.GET." + name + "." + subject
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	m, err := c.nc.RequestWithContext(ctx, api, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		// Nobody answers direct gets: the stream is missing, or was made
		// before it allowed them (provisioning raises allow_direct).
		return StoredMsg{}, fmt.Errorf("read %s on %s: %w: the stream is missing or allows no direct gets", name, subject,
			ErrNotProvisioned)
	}
	if err != nil {
		return StoredMsg{}, fmt.Errorf("read %s on %s: %w", name, subject, c.refused(api, translate(err)))
	}
	// As in Batch: only a reply without a sequence is the server's status.
	seqHeader := m.Header.Get(jetstream.SequenceHeader)
	if seqHeader == "" {
		switch status := m.Header.Get("Status"); status {
		case "404":
			return StoredMsg{}, fmt.Errorf("read %s on %s: %w", name, subject, ErrNotFound)
		default:
			return StoredMsg{}, fmt.Errorf("read %s on %s: status %q %s", name, subject, status, m.Header.Get("Description"))
		}
	}
	seq, err := strconv.ParseUint(seqHeader, 10, 64)
	if err != nil {
		return StoredMsg{}, fmt.Errorf("read %s: a reply with sequence %q: %w", name, seqHeader, err)
	}
	at, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	return StoredMsg{Subject: m.Header.Get(jetstream.SubjectHeader), Sequence: seq, Header: Header(m.Header),
		Data: m.Data, Time: at}, nil
}

// stream returns a handle on stream s, asking the server only the first
// time.
func (c *Client) stream(ctx context.Context, s Stream) (jetstream.Stream, error) {
	name := c.StreamName(s)
	if st, ok := c.streams.Load(name); ok {
		return st.(jetstream.Stream), nil
	}
	st, err := c.js.Stream(ctx, name)
	if err != nil {
		return nil, translate(err)
	}
	c.streams.Store(name, st)
	return st, nil
}

// StreamLeader names the server that leads stream, "" during an election.
func (c *Client) StreamLeader(ctx context.Context, stream string) (string, error) {
	st, err := c.js.Stream(ctx, stream)
	if err != nil {
		return "", translate(err)
	}
	if st.CachedInfo().Cluster == nil {
		return "", nil
	}
	return st.CachedInfo().Cluster.Leader, nil
}

// ConsumerState is where a durable consumer stands.
type ConsumerState struct {
	// Delivered counts messages handed out at least once; Pending the ones
	// not yet handed out; AckPending the ones handed out and not yet acked.
	Delivered, Pending, AckPending uint64
	// AckWait is how long the server waits for an ack or a heartbeat.
	AckWait time.Duration
	// Waiting counts the pull requests open now: a consumer someone is
	// pulling from has at least one.
	Waiting int
}

// ConsumerState returns the state of durable on stream s.
func (c *Client) ConsumerState(ctx context.Context, s Stream, durable string) (ConsumerState, error) {
	cons, err := c.js.Consumer(ctx, c.StreamName(s), durable)
	if err != nil {
		return ConsumerState{}, translate(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return ConsumerState{}, translate(err)
	}
	return ConsumerState{Delivered: info.Delivered.Stream, Pending: info.NumPending, AckPending: uint64(info.NumAckPending),
		AckWait: info.Config.AckWait, Waiting: info.NumWaiting}, nil
}

// SubjectCounts returns how many messages stream s holds on each subject
// matching filter.
func (c *Client) SubjectCounts(ctx context.Context, s Stream, filter string) (map[string]uint64, error) {
	st, err := c.js.Stream(ctx, c.StreamName(s))
	if err != nil {
		return nil, translate(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, translate(err)
	}
	return info.State.Subjects, nil
}

// StoredBytes is what Interlock's streams and runs bucket hold on disk.
func (c *Client) StoredBytes(ctx context.Context) (uint64, error) {
	names := []string{"KV_" + c.BucketName(RunsBucket), "KV_" + c.BucketName(PendingBucket)}
	for _, s := range Streams {
		names = append(names, c.StreamName(s))
	}
	var total uint64
	for _, name := range names {
		st, err := c.js.Stream(ctx, name)
		if err != nil {
			return 0, translate(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, translate(err)
		}
		total += info.State.Bytes
	}
	return total, nil
}

// MsgCount returns how many messages stream s holds.
func (c *Client) MsgCount(ctx context.Context, s Stream) (uint64, error) {
	st, err := c.js.Stream(ctx, c.StreamName(s))
	if err != nil {
		return 0, translate(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, translate(err)
	}
	return info.State.Msgs, nil
}

// SubjectCount returns how many messages stream s holds on subject (no
// wildcards).
func (c *Client) SubjectCount(ctx context.Context, s Stream, subject string) (int, error) {
	counts, err := c.SubjectCounts(ctx, s, subject)
	return int(counts[subject]), err
}

// Messages returns up to limit messages of stream s on subject (which may
// contain wildcards), oldest first, starting at sequence from (0 for the
// first); fewer than limit only when no more match. On a stream that
// allows direct gets (events, AG-UI events, dead letters) that is one
// batched request (Batch), or more when the server ends a batch early (it
// caps a batch's bytes); on the others, which only tests and operators
// list, one request per message.
func (c *Client) Messages(ctx context.Context, s Stream, subject string, from uint64, limit int) ([]StoredMsg, error) {
	st, err := c.stream(ctx, s)
	if err != nil {
		return nil, err
	}
	if st.CachedInfo().Config.AllowDirect {
		var out []StoredMsg
		for {
			msgs, more, err := c.Batch(ctx, c.StreamName(s), subject, from, limit-len(out))
			if err != nil {
				return nil, err
			}
			out = append(out, msgs...)
			if !more || len(msgs) == 0 || len(out) == limit {
				return out, nil
			}
			from = msgs[len(msgs)-1].Sequence + 1
		}
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return nil, translate(err)
	}
	var out []StoredMsg
	if info.State.Msgs == 0 {
		return nil, nil
	}
	if from == 0 {
		from = info.State.FirstSeq
	}
	for seq := from; len(out) < limit && seq <= info.State.LastSeq; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if err != nil {
			if err = translate(err); isNotFound(err) {
				break
			}
			return out, err
		}
		out = append(out, StoredMsg{Subject: m.Subject, Sequence: m.Sequence, Header: Header(m.Header), Data: m.Data, Time: m.Time})
		seq = m.Sequence + 1
	}
	return out, nil
}

// batchBytes bounds the bytes of one batched read: the server ends the
// batch there (with more to come), which keeps a reader's memory bounded
// and stays far below the server's slow-consumer limit (max_pending,
// 64 MB by default), which also caps a batch.
const batchBytes = 1 << 20

// numPendingHeader counts, on a batch's end, the messages matching its
// filter after the last one sent.
const numPendingHeader = "Nats-Num-Pending"

// Batch reads up to limit messages of the named stream on subjects
// matching filter, oldest first, from sequence from on (0: the first), with
// one batched direct get ($JS.API.DIRECT.GET.<stream>, nats-server 2.11+):
// one request, answered by the stream (any replica: the stream must allow
// direct gets) with the messages and an end-of-batch status. more says
// whether messages matching filter remain after the last one returned.
func (c *Client) Batch(ctx context.Context, stream, filter string, from uint64, limit int) (msgs []StoredMsg, more bool, err error) {
	if limit < 1 {
		return nil, false, fmt.Errorf("read %s: a batch of %d messages", stream, limit)
	}
	req, err := json.Marshal(struct {
		Seq      uint64 `json:"seq,omitempty"`
		NextFor  string `json:"next_by_subj"`
		Batch    int    `json:"batch"`
		MaxBytes int    `json:"max_bytes"`
	}{from, filter, limit, batchBytes})
	if err != nil {
		return nil, false, err
	}
	inbox := c.nc.NewInbox()
	replies := make(chan *nats.Msg, limit+1)
	sub, err := c.nc.ChanSubscribe(inbox, replies)
	if err != nil {
		return nil, false, translate(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	api := "$JS.API.DIRECT.GET." + stream
	if err := c.nc.PublishRequest(api, inbox, req); err != nil {
		return nil, false, fmt.Errorf("read %s: %w", stream, translate(err))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	for {
		var m *nats.Msg
		select {
		case m = <-replies:
		case <-ctx.Done():
			return nil, false, fmt.Errorf("read %s: %w", stream, c.refused(api, ctx.Err()))
		}
		// A stored message carries its sequence; only a reply without one
		// is the server's status. A publisher may have stored a Status
		// header of its own, which must not end (or fail) the read.
		seqHeader := m.Header.Get(jetstream.SequenceHeader)
		if seqHeader == "" {
			switch status := m.Header.Get("Status"); status {
			case "204": // end of batch
				return msgs, m.Header.Get(numPendingHeader) != "0", nil
			case "404": // nothing matches
				return nil, false, nil
			default:
				return nil, false, fmt.Errorf("read %s: status %q %s", stream, status, m.Header.Get("Description"))
			}
		}
		seq, err := strconv.ParseUint(seqHeader, 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("read %s: a reply with sequence %q: %w", stream, seqHeader, err)
		}
		at, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
		msgs = append(msgs, StoredMsg{Subject: m.Header.Get(jetstream.SubjectHeader), Sequence: seq,
			Header: Header(m.Header), Data: m.Data, Time: at})
	}
}

// Request sends data on subject (core NATS, stored nowhere) and returns the
// one reply, which arrives in this client's own inbox. No server on subject
// is an error wrapping ErrNoStream; none within ctx, ErrTimeout.
func (c *Client) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	m, err := c.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return nil, translate(err)
	}
	return m.Data, nil
}

// Serve answers the requests on subject with what fn returns (every
// process serving subject in the same queue shares the requests), at most
// parallel at once, each in its own goroutine. A request without a reply
// subject is dropped. Unsubscribe stops serving.
func (c *Client) Serve(subject, queue string, parallel int, fn func(data []byte) []byte) (*Subscription, error) {
	slots := make(chan struct{}, max(parallel, 1))
	sub, err := c.nc.QueueSubscribe(subject, queue, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		slots <- struct{}{}
		go func() {
			defer func() { <-slots }()
			_ = m.Respond(fn(m.Data))
		}()
	})
	if err != nil {
		return nil, translate(err)
	}
	if err := c.nc.Flush(); err != nil && (c.nc.IsClosed() || !c.nc.IsReconnecting()) {
		_ = sub.Unsubscribe()
		return nil, translate(err)
	}
	return &Subscription{sub: sub}, nil
}
