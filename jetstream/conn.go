package jetstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
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
	// AutoStorage, for Config.PendingStorage: memory on a NATS cluster,
	// where a memory-backed stream's configuration outlives a restart of
	// every server, and file on a single server, where a restart removes
	// it and only a provisioner creates it again. For RecordsStorage it is
	// FileStorage: records are kept in memory only where asked for.
	AutoStorage Storage = "auto"
)

// Config is what Interlock's streams and bucket are.
type Config struct {
	// Prefix of every subject, stream and bucket; default "interlock".
	Prefix string
	// Replicas of every stream and the bucket; default 1 (use 3 on a cluster).
	Replicas int
	// Storage of every stream; default FileStorage.
	Storage Storage
	// PendingStorage is where a newly created pending index (PendingBucket)
	// keeps its entries; default MemoryStorage. The index is derived from
	// the run records and a coordinator rebuilds it when it is lost (a
	// server restart), so it needs no disk writes of its own; FileStorage
	// keeps it on disk, at three fsyncs more per cycle with fsync before
	// every ack; AutoStorage picks by the deployment. An existing bucket
	// keeps the storage it was created with.
	PendingStorage Storage
	// RecordsStorage is where a newly created runs bucket (RunsBucket)
	// keeps the run records; default FileStorage. With MemoryStorage the
	// records' writes cost no fsync: the coordinator carries each record,
	// sealed, in the audit event its transition writes anyway, and puts
	// the records back from the trail when the bucket loses them (a server
	// restart). Memory needs a bucket with one replica: a single server,
	// or Replicas 1 (ErrReplicatedMemoryRecords). AutoStorage is
	// FileStorage. An existing bucket keeps the storage it was created
	// with.
	RecordsStorage Storage
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
	if c.PendingStorage == "" || c.Storage == MemoryStorage {
		c.PendingStorage = MemoryStorage
	}
	if c.RecordsStorage == "" || c.Storage == MemoryStorage {
		c.RecordsStorage = c.Storage
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
