package main

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/processor/links"
)

func newGateway(g *globals) *cobra.Command {
	var identities, linkSecretEnv, metricsAddr string
	var linkTTL, stopTimeout time.Duration
	var web webFlags
	var sl slackFlags
	cmd := &cobra.Command{
		Use:   "gateway --identities FILE",
		Short: "Serve the HTTP gateway for approvers (JSON API, API tokens)",
		Long: `gateway serves the approvers' JSON API (docs/openapi.yaml): list pending
interrupts, read runs and their audit trail, decide. Callers authenticate with
API tokens listed (as SHA-256 digests) in the identities file; the gateway
publishes each decision as the caller, and the coordinator enforces who may
decide. Any number of gateways may run behind a load balancer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkStopTimeout(stopTimeout); err != nil {
				return err
			}
			ctx := cmd.Context()
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			dir, err := approvers.Load(identities)
			if err != nil {
				return usage(err)
			}
			signer, err := linkSigner(linkSecretEnv, linkTTL)
			if err != nil {
				return err
			}
			tlsCfg, err := web.tls()
			if err != nil {
				return err
			}
			slackCfg, err := sl.config()
			if err != nil {
				return err
			}
			return g.runService(ctx, service{Name: "interlock-gateway", URL: g.natsURL, MetricsAddr: metricsAddr, Log: log, StopTimeout: stopTimeout,
				Start: func(client *jetstream.Client, reg *prometheus.Registry) (stopFunc, error) {
					return startGateway(client, dir, signer, linkTTL, web.listen, tlsCfg, log, reg, slackCfg)
				}})
		},
	}
	web.register(cmd, "127.0.0.1:8080", "address to serve the gateway's HTTP on")
	// Before the rename these shadowed the NATS --listen and --tls-* flags.
	for _, name := range []string{"listen", "tls-cert", "tls-key"} {
		deprecatedAlias(cmd.Flags(), name, "gateway-"+name)
	}
	cmd.Flags().StringVar(&identities, "identities", "", "approvers and their API token digests (YAML)")
	cmd.Flags().StringVar(&linkSecretEnv, "link-secret-env", "", "environment variable holding the secret that signs one-click decision links; only the gateway holds it: it mints links for the notifier, for the sinks the identities file lists under links")
	cmd.Flags().DurationVar(&linkTTL, "link-ttl", 0, "how long a one-click link lasts (default 24h, at most 720h; never past its interrupt's deadline)")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus /metrics, /healthz and /readyz here")
	sl.register(cmd)
	stopTimeoutFlag(cmd, &stopTimeout)
	_ = cmd.MarkFlagRequired("identities")
	return cmd
}

// slackFlags turn on the Slack interactivity endpoint.
type slackFlags struct {
	secretEnv, tokenEnv, team, enterprise, apiURL, inboxURL string
	emailLookup                                             bool
	channels                                                map[string]string
	// appTokenEnv names the variable of the app-level token (Socket
	// Mode); socketConns is how many connections to keep.
	appTokenEnv string
	socketConns int
}

func (f *slackFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.secretEnv, "slack-signing-secret-env", "", "environment variable holding the Slack app's signing secret; turns on POST /v1/slack/interactions (decisions from Slack buttons and forms, as the identity the Slack user maps to: identities: slack)")
	fs.StringVar(&f.tokenEnv, "slack-bot-token-env", "", "environment variable holding the Slack bot token (xoxb-...): posts the cards (--slack-channel), opens the Answer… form (views.open) and updates messages; only the gateway holds it")
	fs.StringToStringVar(&f.channels, "slack-channel", nil, "SINK=CHANNEL: post the cards of the notifier's Slack sink SINK (cards: gateway) into channel CHANNEL (C...); repeat per sink. The notifier names the sink, the gateway picks the channel")
	fs.StringVar(&f.inboxURL, "slack-inbox-url", "", "the gateway's public URL: cards link to the question in its inbox")
	fs.StringVar(&f.team, "slack-team", "", "the Slack workspace (team id, T...) requests must come from; users of any other are refused")
	fs.StringVar(&f.enterprise, "slack-enterprise", "", "the Enterprise Grid org (E...) requests must come from, instead of --slack-team")
	fs.StringVar(&f.apiURL, "slack-api-url", "", "the Slack Web API's base URL (default https://slack.com/api/)")
	fs.StringVar(&f.appTokenEnv, "slack-app-token-env", "", "environment variable holding the Slack app-level token (xapp-..., scope connections:write): turns on Socket Mode, the clicks and forms received over WebSocket connections the gateway opens to Slack, for a gateway with no public URL; only the gateway holds it")
	fs.IntVar(&f.socketConns, "slack-socket-connections", 2, "how many Socket Mode connections to keep open (1 to 10; Slack delivers each click on one of them)")
	fs.BoolVar(&f.emailLookup, "slack-email-lookup", false, "map Slack users no identity names (slack:) by the identities file's email, looked up in Slack (users.lookupByEmail; needs the bot token and users:read.email); trusts whoever administers the workspace to set e-mail addresses")
}

// config is the Slack configuration the flags give: nil without a signing
// secret.
func (f slackFlags) config() (*gateway.SlackConfig, error) {
	if f.secretEnv == "" {
		if f.tokenEnv != "" || f.team != "" || f.enterprise != "" || len(f.channels) > 0 || f.appTokenEnv != "" {
			return nil, usagef("--slack-*: give --slack-signing-secret-env to turn on the Slack endpoint")
		}
		return nil, nil
	}
	secret := os.Getenv(f.secretEnv)
	if secret == "" {
		return nil, usagef("--slack-signing-secret-env: %s is empty or unset", f.secretEnv)
	}
	if f.team == "" && f.enterprise == "" {
		return nil, usagef("--slack-team or --slack-enterprise: pin the workspace Slack requests come from")
	}
	c := &gateway.SlackConfig{SigningSecret: []byte(secret), TeamID: f.team, EnterpriseID: f.enterprise, APIURL: f.apiURL,
		EmailLookup: f.emailLookup, Channels: f.channels, InboxURL: f.inboxURL}
	if len(f.channels) > 0 && f.tokenEnv == "" {
		return nil, usagef("--slack-channel needs --slack-bot-token-env: the gateway posts the cards")
	}
	if f.emailLookup && f.tokenEnv == "" {
		return nil, usagef("--slack-email-lookup needs --slack-bot-token-env: the lookup is a Web API call")
	}
	if f.tokenEnv != "" {
		if c.BotToken = os.Getenv(f.tokenEnv); c.BotToken == "" {
			return nil, usagef("--slack-bot-token-env: %s is empty or unset", f.tokenEnv)
		}
	}
	if f.appTokenEnv != "" {
		// Never the token itself in an error: only its variable.
		switch c.AppToken = os.Getenv(f.appTokenEnv); {
		case c.AppToken == "":
			return nil, usagef("--slack-app-token-env: %s is empty or unset", f.appTokenEnv)
		case !strings.HasPrefix(c.AppToken, "xapp-"):
			return nil, usagef("--slack-app-token-env: %s does not hold an app-level token (xapp-...)", f.appTokenEnv)
		}
		if f.socketConns < 1 || f.socketConns > 10 {
			return nil, usagef("--slack-socket-connections %d: give 1 to 10", f.socketConns)
		}
		c.SocketConnections = f.socketConns
	}
	return c, nil
}

// linkSigner reads the link secret from the environment variable env; no
// variable, no links. ttl is --link-ttl, checked here.
func linkSigner(env string, ttl time.Duration) (*links.Signer, error) {
	if ttl < 0 || ttl > gateway.MaxLinkTTL {
		return nil, usagef("--link-ttl %s: give a duration up to %s", ttl, gateway.MaxLinkTTL)
	}
	if env == "" {
		return nil, nil
	}
	secret := os.Getenv(env)
	if secret == "" {
		return nil, usagef("--link-secret-env: %s is empty or unset", env)
	}
	s, err := links.NewSigner([]byte(secret))
	if err != nil {
		return nil, usage(err)
	}
	return s, nil
}

// webFlags are where and how the gateway serves HTTP.
type webFlags struct{ listen, cert, key string }

// register adds the --gateway-* flags to cmd (serve and gateway: one name,
// one meaning).
func (f *webFlags) register(cmd *cobra.Command, defaultListen, listenUsage string) {
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "gateway-listen", defaultListen, listenUsage)
	fs.StringVar(&f.cert, "gateway-tls-cert", "", "serve the gateway over HTTPS with this certificate (PEM; with --gateway-tls-key)")
	fs.StringVar(&f.key, "gateway-tls-key", "", "the private key of --gateway-tls-cert (PEM)")
}

// tls loads the certificate and key, if given: nil means plain HTTP.
func (f webFlags) tls() (*tls.Config, error) {
	if (f.cert == "") != (f.key == "") {
		return nil, usage(errors.New("give the TLS certificate and its key together"))
	}
	if f.cert == "" {
		return nil, nil
	}
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, usagef("TLS certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// startGateway serves the gateway on addr (over TLS with tlsCfg) until the
// returned stop.
func startGateway(client *jetstream.Client, dir *approvers.Directory, signer *links.Signer, linkTTL time.Duration, addr string, tlsCfg *tls.Config,
	log *slog.Logger, reg *prometheus.Registry, slackCfg *gateway.SlackConfig) (stopFunc, error) {
	stop, _, err := listenGateway(client, dir, signer, linkTTL, addr, tlsCfg, log, reg, slackCfg)
	return stop, err
}

// listenGateway is startGateway, also returning the URL it listens on.
func listenGateway(client *jetstream.Client, dir *approvers.Directory, signer *links.Signer, linkTTL time.Duration, addr string, tlsCfg *tls.Config,
	log *slog.Logger, reg *prometheus.Registry, slackCfg *gateway.SlackConfig) (stopFunc, string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", usage(err)
	}
	gw, err := gateway.New(context.Background(), client, gateway.Config{Directory: dir, Logger: log, Links: signer, LinkTTL: linkTTL,
		Registry: reg, Slack: slackCfg})
	if err != nil {
		l.Close()
		return nil, "", err
	}
	srv := gw.Server()
	srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	scheme := "http://"
	if tlsCfg != nil {
		srv.TLSConfig, l, scheme = tlsCfg, tls.NewListener(l, tlsCfg), "https://"
	}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("gateway", "error", err)
		}
	}()
	log.Info("gateway listening", "url", scheme+l.Addr().String(), "inbox", scheme+l.Addr().String()+"/inbox")
	// The HTTP server first, so that no request starts more work; then
	// the gateway's own work, all within ctx.
	return func(ctx context.Context) error {
		return errors.Join(srv.Shutdown(ctx), gw.Stop(ctx))
	}, scheme + l.Addr().String(), nil
}
