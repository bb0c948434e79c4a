package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	neturl "net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/subjects"
)

// globals are the flags every command shares.
type globals struct {
	natsURL   string
	natsUser  string
	inbox     string
	creds     string
	tlsCA     string
	tlsCert   string
	tlsKey    string
	prefix    string
	json      bool
	timeout   time.Duration
	logFormat string
	logLevel  string
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func (g *globals) register(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&g.natsURL, "nats-url", os.Getenv("NATS_URL"), "NATS server URL(s); env NATS_URL (serve and demo: empty starts an embedded server)")
	f.StringVar(&g.creds, "creds", os.Getenv("NATS_CREDS"), "NATS credentials file; env NATS_CREDS")
	f.StringVar(&g.natsUser, "nats-user", os.Getenv("NATS_USER"), "NATS user name; its password is read from env NATS_PASSWORD (never a flag); env NATS_USER")
	f.StringVar(&g.inbox, "inbox-prefix", os.Getenv("NATS_INBOX_PREFIX"),
		"prefix of this connection's reply subjects (default _INBOX.<user> for --nats-user or the URL's user); env NATS_INBOX_PREFIX")
	f.StringVar(&g.tlsCA, "nats-tls-ca", os.Getenv("NATS_CA"), "CA certificate to verify the NATS server; env NATS_CA")
	f.StringVar(&g.tlsCert, "nats-tls-cert", os.Getenv("NATS_CERT"), "client certificate for TLS to NATS; env NATS_CERT")
	f.StringVar(&g.tlsKey, "nats-tls-key", os.Getenv("NATS_KEY"), "the key of --nats-tls-cert; env NATS_KEY")
	for _, name := range []string{"tls-ca", "tls-cert", "tls-key"} {
		deprecatedAlias(f, name, "nats-"+name)
	}
	f.StringVar(&g.prefix, "prefix", envOr("INTERLOCK_PREFIX", "interlock"), "subject prefix; env INTERLOCK_PREFIX")
	f.BoolVar(&g.json, "json", false, "print JSON for machines instead of text")
	f.DurationVar(&g.timeout, "timeout", 10*time.Second, "how long to wait for NATS and for a verdict")
	f.StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
}

func (g *globals) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, usagef("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch g.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format %q is not text or json", g.logFormat)
}

func (g *globals) tlsConfig() (*tls.Config, error) {
	if g.tlsCA == "" && g.tlsCert == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if g.tlsCA != "" {
		pem, err := os.ReadFile(g.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--nats-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--nats-tls-ca %s: no PEM certificates", g.tlsCA)
		}
		cfg.RootCAs = pool
	}
	if g.tlsCert != "" || g.tlsKey != "" {
		cert, err := tls.LoadX509KeyPair(g.tlsCert, g.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--nats-tls-cert/--nats-tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// dial connects to url (default: the local server `interlock serve` starts).
func (g *globals) dial(ctx context.Context, url, name string) (*jetstream.Client, error) {
	return g.dialConfig(ctx, url, name, jetstream.Config{})
}

// dialConfig is dial with stream settings; the prefix comes from --prefix.
func (g *globals) dialConfig(ctx context.Context, url, name string, cfg jetstream.Config) (*jetstream.Client, error) {
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	tlsCfg, err := g.tlsConfig()
	if err != nil {
		return nil, usage(err)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	cfg.Prefix = g.prefix
	return jetstream.Dial(ctx, jetstream.DialConfig{URL: url, CredsFile: g.creds, TLS: tlsCfg, Name: name,
		User: g.natsUser, Password: os.Getenv("NATS_PASSWORD"), InboxPrefix: g.inboxPrefix(url)}, cfg)
}

// inboxPrefix is the connection's reply prefix: --inbox-prefix, else the
// user's own (subjects.InboxPrefix), which deploy/nats/auth.conf lets each
// user subscribe to; nats.go's default when no user is known.
func (g *globals) inboxPrefix(urls string) string {
	if g.inbox != "" {
		return g.inbox
	}
	user := g.natsUser
	if user == "" {
		if u, err := neturl.Parse(strings.TrimSpace(strings.Split(urls, ",")[0])); err == nil && u.User != nil {
			user = u.User.Username()
		}
	}
	if user == "" {
		return ""
	}
	return subjects.InboxPrefix(user)
}

// namedUser is who the commands connect to urls as: --nats-user, else the
// first URL's user, else "(credentials file)" with --creds; "" when no user
// is named (an open server).
func (g *globals) namedUser(urls string) string {
	if g.natsUser != "" {
		return g.natsUser
	}
	if u, err := neturl.Parse(strings.TrimSpace(strings.Split(urls, ",")[0])); err == nil && u.User != nil && u.User.Username() != "" {
		return u.User.Username()
	}
	if g.creds != "" {
		return "(credentials file)"
	}
	return ""
}

// withClient is how every command that needs NATS gets it: it connects to
// url as name (dialConfig), runs fn with the client and closes the
// connection when fn returns.
func (g *globals) withClient(ctx context.Context, url, name string, cfg jetstream.Config, fn func(*jetstream.Client) error) error {
	c, err := g.dialConfig(ctx, url, name, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// withAPI runs an operator command's fn with the SDK's client on a
// connection to --nats-url (withClient).
func (g *globals) withAPI(ctx context.Context, fn func(api *processor.Client) error) error {
	return g.withClient(ctx, g.natsURL, "interlock-cli", jetstream.Config{}, func(c *jetstream.Client) error {
		return fn(processor.NewClient(c))
	})
}

// aliasOf is the annotation that names the flag a deprecated alias stands for.
const aliasOf = "interlock-alias-of"

// deprecatedAlias registers old, hidden, as another name of the flag name:
// command lines written before the rename keep working, and warnDeprecated
// says what to write instead. (pflag's MarkDeprecated would print its
// warning where cobra prints output: among --json output, on stdout.)
func deprecatedAlias(fs *pflag.FlagSet, old, name string) {
	f := fs.Lookup(name)
	fs.AddFlag(&pflag.Flag{Name: old, Usage: "deprecated: use --" + name, Value: f.Value, DefValue: f.DefValue,
		NoOptDefVal: f.NoOptDefVal, Hidden: true, Annotations: map[string][]string{aliasOf: {name}}})
}

// changed reports whether the flag name, or one of its deprecated aliases,
// was set on the command line.
func changed(cmd *cobra.Command, name string) bool {
	set := false
	cmd.Flags().Visit(func(f *pflag.Flag) {
		set = set || f.Name == name || slices.Contains(f.Annotations[aliasOf], name)
	})
	return set
}

// warnDeprecated tells, on stderr, which deprecated flag names cmd was
// given and what replaces them.
func warnDeprecated(cmd *cobra.Command) {
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if to := f.Annotations[aliasOf]; len(to) > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "interlock: --%s is deprecated; use --%s\n", f.Name, to[0])
		}
	})
}

// printJSON writes v as indented JSON, with the characters that could
// steer a terminal written as \u escapes (jsonEscapeSteering): the same
// JSON value.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(jsonEscapeSteering(b), '\n'))
	return err
}
