package slack

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// connectionsOpen is a Web API whose apps.connections.open answers url to
// the app-level token only.
func connectionsOpen(t *testing.T, tls bool, url string) *httptest.Server {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/apps.connections.open" || r.Header.Get("Authorization") != "Bearer xapp-1-app" {
			_, _ = w.Write([]byte(`{"ok": false, "error": "invalid_auth"}`))
			return
		}
		_, _ = w.Write([]byte(`{"ok": true, "url": "` + url + `"}`))
	})
	srv := httptest.NewServer(h)
	if tls {
		srv.Close()
		srv = httptest.NewTLSServer(h)
	}
	t.Cleanup(srv.Close)
	return srv
}

// Attack (downgrade): a Web API reached over TLS that answers a ws:// URL
// is not followed: Socket Mode connects only over wss://, so the
// connection that proves the envelopes Slack's is TLS to Slack's host.
func TestSocketRefusesPlainWebSocket(t *testing.T) {
	t.Parallel()
	api := connectionsOpen(t, true, "ws://127.0.0.1:1/link?ticket=TICKET-SECRET")
	s := &Socket{AppToken: "xapp-1-app", APIURL: api.URL + "/api/", HTTP: api.Client(),
		Handle: func(context.Context, Envelope) (any, error) { return nil, nil }}
	_, err := s.connect(context.Background())
	require.ErrorIs(t, err, ErrSocket)
	assert.Contains(t, err.Error(), "not wss://")
	assert.NotContains(t, err.Error(), "TICKET-SECRET")
}

// The app token and the URL's ticket are credentials: a failed open or
// dial names neither; a bot token is not an app token.
func TestSocketErrorsNameNoCredential(t *testing.T) {
	t.Parallel()
	api := connectionsOpen(t, false, "ws://127.0.0.1:1/link?ticket=TICKET-SECRET")
	s := &Socket{AppToken: "xapp-1-app", APIURL: api.URL + "/api/",
		Handle: func(context.Context, Envelope) (any, error) { return nil, nil }}
	_, err := s.connect(context.Background())
	require.ErrorIs(t, err, ErrSocket)
	assert.NotContains(t, err.Error(), "TICKET-SECRET")
	assert.Contains(t, err.Error(), "127.0.0.1:1")

	s.AppToken = "xapp-1-wrong"
	_, err = s.connect(context.Background())
	require.ErrorIs(t, err, ErrAPI)
	assert.NotContains(t, err.Error(), "xapp-1-wrong")

	s.AppToken = "xoxb-bot"
	require.ErrorIs(t, s.Check(), ErrSocket)
}
