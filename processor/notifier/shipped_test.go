package notifier

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/interlockhq/interlock/internal/syncbuf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// shippedConfigs are the example notifier configurations the repository
// ships, by where they are: deploy/notifier.yaml (also what compose mounts)
// and the one in the Kubernetes manifest's ConfigMap.
func shippedConfigs(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	data, err := os.ReadFile("../../deploy/notifier.yaml")
	require.NoError(t, err)
	out["deploy/notifier.yaml"] = data
	k8s, err := os.ReadFile("../../deploy/kubernetes/interlock.yaml")
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(k8s))
	for {
		var doc struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		if cfg, ok := doc.Data["notifier.yaml"]; ok && doc.Kind == "ConfigMap" {
			out["deploy/kubernetes/interlock.yaml (ConfigMap notifier.yaml)"] = []byte(cfg)
		}
	}
	require.Len(t, out, 2)
	return out
}

// Every shipped example configuration delivers as shipped: each of its
// sinks, pointed at a real local server of its kind (the only change: the
// address, and trust in the test server's certificate), receives the
// notification. Sender, recipients, STARTTLS, AUTH, secrets, headers,
// routes and templates stay as shipped.
func TestShippedConfigsDeliver(t *testing.T) {
	t.Parallel()
	for name, data := range shippedConfigs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, err := ParseConfig(name, data)
			require.NoError(t, err)
			e := newEnv(t)
			var logLines syncbuf.Buffer
			opts := Options{Sinks: map[string]Sink{}}
			check := map[string]func(){}
			for i := range cfg.Sinks {
				sc := &cfg.Sinks[i]
				switch sc.Type {
				case "webhook", "slack":
					r := newReceiver(t, nil)
					sc.URL = r.URL
					check[sc.Name] = func() {
						got := r.waitN(t, 1)[0]
						for k, v := range sc.Headers {
							assert.Equal(t, v, got.header.Get(k), sc.Name)
						}
						if sc.Secret != "" {
							assert.NoError(t, VerifySignature([]byte(sc.Secret), got.header.Get(HeaderTimestamp),
								got.header.Get(HeaderSignature), got.body, time.Minute, time.Now()), sc.Name)
						}
					}
				case "email":
					mb := newMailbox(t, sc.SMTP.StartTLS || sc.SMTP.TLS, sc.SMTP.Username != "")
					mb.user, mb.pass = sc.SMTP.Username, sc.SMTP.Password
					host, port, _ := net.SplitHostPort(mb.addr)
					sc.SMTP.Host = host
					sc.SMTP.Port, _ = strconv.Atoi(port)
					if mb.cert != nil {
						ca := filepath.Join(t.TempDir(), "ca.pem")
						require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: mb.cert}), 0o600))
						sc.SMTP.CAFile = ca
					}
					check[sc.Name] = func() {
						require.Eventually(t, func() bool { return len(mb.got()) == 1 }, 15*time.Second, 10*time.Millisecond, sc.Name)
						m := parseMail(t, mb.got()[0])
						assert.Equal(t, sc.From, strings.ReplaceAll(m.header.Get("From"), `"`, ""), sc.Name)
						assert.Len(t, mb.envelopeFroms(), 1)
					}
				case "log":
					opts.Sinks[sc.Name] = &logSink{w: &logLines} // the shipped sink, writing here instead of stdout
					check[sc.Name] = func() {
						require.Eventually(t, func() bool { return strings.Contains(logLines.String(), "\n") }, 15*time.Second,
							10*time.Millisecond, sc.Name)
					}
				case "nats":
					got := make(chan []byte, 1)
					sub, err := e.admin.Subscribe(sc.Subject, func(_ string, data []byte) { got <- data })
					require.NoError(t, err)
					t.Cleanup(sub.Unsubscribe)
					check[sc.Name] = func() {
						select {
						case b := <-got:
							assert.True(t, json.Valid(b), sc.Name)
						case <-time.After(15 * time.Second):
							t.Fatalf("%s: nothing published", sc.Name)
						}
					}
				default:
					t.Fatalf("sink %s: no test server for type %s", sc.Name, sc.Type)
				}
			}
			n := e.startConfig(cfg, nil, opts)
			// A suspension every route matches: a refund tool call of the
			// finance team.
			e.suspend("refunds")
			for sink, c := range check {
				c()
				require.Eventually(t, func() bool { return n.Count(sink, OutcomeDelivered) == 1 }, 15*time.Second,
					10*time.Millisecond, "%s delivered", sink)
				assert.Zero(t, n.Count(sink, OutcomeDeadLettered), sink)
			}
		})
	}
}
