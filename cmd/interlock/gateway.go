package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/processor/links"
)

func newGateway(g *globals) *cobra.Command {
	var listen, identities, linkSecretEnv, metricsAddr string
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
			ctx := cmd.Context()
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			dir, err := approvers.Load(identities)
			if err != nil {
				return usageError{err}
			}
			signer, err := linkSigner(linkSecretEnv)
			if err != nil {
				return err
			}
			return runService(ctx, g, log, "interlock-gateway", g.natsURL, jetstream.Config{}, nil, metricsAddr,
				func(client *jetstream.Client, reg *prometheus.Registry) (func(), error) {
					return startGateway(client, dir, signer, listen, log, reg)
				})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "address to serve HTTP on")
	cmd.Flags().StringVar(&identities, "identities", "", "approvers and their API token digests (YAML)")
	cmd.Flags().StringVar(&linkSecretEnv, "link-secret-env", "", "environment variable holding the secret that signs one-click decision links (the notifier's links.secret_env)")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus /metrics, /healthz and /readyz here")
	_ = cmd.MarkFlagRequired("identities")
	return cmd
}

// linkSigner reads the link secret from the environment variable env; no
// variable, no links.
func linkSigner(env string) (*links.Signer, error) {
	if env == "" {
		return nil, nil
	}
	secret := os.Getenv(env)
	if secret == "" {
		return nil, usageError{fmt.Errorf("--link-secret-env: %s is empty or unset", env)}
	}
	s, err := links.NewSigner([]byte(secret))
	if err != nil {
		return nil, usageError{err}
	}
	return s, nil
}

// startGateway serves the gateway on addr until the returned stop.
func startGateway(client *jetstream.Client, dir *approvers.Directory, signer *links.Signer, addr string, log *slog.Logger, reg *prometheus.Registry) (func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageError{err}
	}
	gw, err := gateway.New(context.Background(), client, gateway.Config{Directory: dir, Logger: log, Links: signer, Registry: reg})
	if err != nil {
		l.Close()
		return nil, err
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("gateway", "error", err)
		}
	}()
	log.Info("gateway listening", "url", "http://"+l.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
