package attack_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/processor/notifier"
	"github.com/interlockhq/interlock/subjects"
)

// linkSecretEnv holds the secret the gateway signs one-click links with
// (`interlock gateway --link-secret-env INTERLOCK_LINK_SECRET`).
const linkSecretEnv = "INTERLOCK_LINK_SECRET"

// linkNotifierConfig is deploy/notifier.yaml with one-click links turned
// on the way docs/notifiers.md prescribes: its e-mail sink made ada's
// personal sink (its consumer is in the shipped auth.conf) (and,
// before only the gateway held the link secret, links.secret_env naming
// the secret the gateway was given too).
func linkNotifierConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../deploy/notifier.yaml")
	require.NoError(t, err)
	cfg := strings.Replace(string(data), "to: [approvers@example.com]", "to: [ada@example.com]\n    personal: ada", 1)
	require.Contains(t, cfg, "personal: ada")
	_, err = notifier.ParseConfig("notifier.yaml", []byte(cfg))
	require.NoError(t, err, "a notifier configuration as prescribed")
	return cfg
}

// linkIdentities is the gateway's identities file for the links tests.
const linkIdentities = `
identities:
  ada: {groups: [finance], links: [approvers-mail]}
  bob: {groups: [ops]}
`

// startLinkGateway runs the gateway as the gateway user, signing links
// with the secret in INTERLOCK_LINK_SECRET.
func startLinkGateway(t *testing.T, d *deployment) *httptest.Server {
	t.Helper()
	dir, err := approvers.Parse("identities", []byte(linkIdentities))
	require.NoError(t, err)
	signer, err := links.NewSigner([]byte(os.Getenv(linkSecretEnv)))
	require.NoError(t, err)
	gw, err := gateway.New(d.ctx, d.client("gateway"), gateway.Config{Directory: dir, Links: signer, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return srv
}

// notifierSecrets are the values of every environment variable the
// notifier's configuration names (secret_env, password_env): what whoever
// holds the notifier's configuration and environment holds.
func notifierSecrets(config string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`\w+_env:\s*(\w+)`).FindAllStringSubmatch(config, -1) {
		if v := os.Getenv(m[1]); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// TestAttackNotifierMintsLink is found item 4: whoever holds the
// notifier's configuration and credentials signs a link deciding as ada,
// or asks the link service for one the notifier would never deliver, and
// POSTs it to the gateway. Every attempt is refused, audited, and decides
// nothing.
func TestAttackNotifierMintsLink(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	srv := startLinkGateway(t, d)
	agent := d.client("agent")
	d.suspend(agent, "run-1", "ada")
	d.suspend(agent, "run-2", "bob")
	config := linkNotifierConfig(t)
	post := func(token string) int {
		resp, err := http.PostForm(srv.URL+"/l/"+token, url.Values{"comment": {"forged"}})
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}

	// 1. Sign a link with every secret the notifier holds.
	secrets := append(notifierSecrets(config), os.Getenv("INTERLOCK_NOTIFIER_PASSWORD"))
	require.NotEmpty(t, secrets)
	tried := 0
	for _, secret := range secrets {
		signer, err := links.NewSigner([]byte(secret))
		if err != nil {
			continue // too short to sign with
		}
		tried++
		for _, run := range []string{"run-1", "run-2"} {
			approver := map[string]string{"run-1": "ada", "run-2": "bob"}[run]
			forged := signer.Sign(links.Link{Run: run, Interrupt: "ask", Action: links.Approve, Approver: approver,
				Expires: time.Now().Add(time.Hour).Unix()})
			assert.Equal(t, http.StatusBadRequest, post(forged), "a link signed with a secret of the notifier's for %s", run)
		}
	}
	require.Positive(t, tried)

	// 2. Ask the link service, as the notifier user, for links it would
	// never deliver: ada's through a shared sink, and an interrupt ada
	// may not decide (bob's run-2) through ada's own sink.
	a := d.attacker("notifier")
	for _, tc := range []struct {
		run, sink string
		code      subjects.Code
	}{
		{"run-1", "finance-slack", subjects.CodeLinkNotRouted},
		{"run-1", "bob-mail", subjects.CodeLinkNotRouted},
		{"run-2", "approvers-mail", subjects.CodeNotAllowed},
		// A run not in the record is one not recorded yet: ask again.
		{"run-9", "approvers-mail", subjects.CodeUnavailable},
	} {
		req, _ := json.Marshal(subjects.LinkRequest{Version: subjects.Version, RunID: tc.run, InterruptID: "ask", Sink: tc.sink})
		msg, err := a.nc.Request("interlock.links.mint", req, 5*time.Second)
		require.NoError(t, err, "the link service answers %s via %s", tc.run, tc.sink)
		var reply subjects.LinkReply
		require.NoError(t, json.Unmarshal(msg.Data, &reply))
		assert.Equal(t, tc.code, reply.Code, "%s via %s: %s", tc.run, tc.sink, reply.Detail)
		assert.Empty(t, reply.Links, "%s via %s", tc.run, tc.sink)
	}
	// Nobody but the gateway serves the link service.
	_, err := a.nc.SubscribeSync("interlock.links.mint")
	require.NoError(t, err)
	a.refused(t, `Subscription to "interlock.links.mint"`)
	// Nor does anyone but the notifier ask.
	agentAttacker := d.attacker("agent")
	_, err = agentAttacker.nc.Request("interlock.links.mint", []byte(`{}`), time.Second)
	assert.ErrorIs(t, err, nats.ErrTimeout)
	agentAttacker.refused(t, `Publish to "interlock.links.mint"`)

	// Nothing was decided, and every refusal is in the audit trail.
	auditor := processor.NewClient(d.client("auditor"))
	for _, run := range []string{"run-1", "run-2"} {
		rec, err := auditor.Run(d.ctx, run)
		require.NoError(t, err)
		assert.Equal(t, subjects.RunSuspended, rec.Status, run)
		assert.Nil(t, rec.Interrupts[0].Decision, run)
	}
	require.Eventually(t, func() bool {
		codes := map[subjects.Code]int{}
		for _, run := range []string{subjects.NoRun, "run-1", "run-2"} {
			evs, err := auditor.Events(d.ctx, run)
			if err != nil {
				continue
			}
			for _, ev := range evs {
				if ev.Type == subjects.EventAccessRefused {
					codes[ev.Code]++
				}
			}
		}
		return codes[subjects.CodeLinkInvalid] == 2*tried && codes[subjects.CodeLinkNotRouted] == 2 &&
			codes[subjects.CodeNotAllowed] == 1
	}, 10*time.Second, 20*time.Millisecond, "every refusal audited")
}

// TestNotifierLinksWorkAsShipped: with the shipped users (notifier,
// gateway) and a personal sink for ada, ada's notification carries links
// the gateway minted, and one of them decides as ada.
func TestNotifierLinksWorkAsShipped(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	srv := startLinkGateway(t, d)
	approve := notifiedLink(t, d, srv)
	resp, err := http.PostForm(approve, nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	rec, err := processor.NewClient(d.client("auditor")).Run(d.ctx, "run-1")
	require.NoError(t, err)
	require.NotNil(t, rec.Interrupts[0].Decision)
	assert.Equal(t, "ada", rec.Interrupts[0].Decision.Approver)
}

// notifiedLink runs the shipped notifier (as the notifier user, its
// e-mail sink caught), suspends run-1 with a refund's tool call for ada,
// and returns the approve link the notifier mailed her, pointed at srv.
func notifiedLink(t *testing.T, d *deployment, srv *httptest.Server) string {
	t.Helper()
	cfg, err := notifier.ParseConfig("notifier.yaml", []byte(linkNotifierConfig(t)))
	require.NoError(t, err)
	p, err := notifier.New(d.provisioner(), cfg, notifier.Options{Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, p.Provision(d.ctx))
	mails := make(chan *notifier.Notification, 4)
	sinks := map[string]notifier.Sink{"approvers-mail": notifier.SinkFunc(func(_ context.Context, n *notifier.Notification) error {
		mails <- n
		return nil
	})}
	for _, name := range []string{"ops-webhook", "finance-slack", "audit-log"} {
		sinks[name] = notifier.SinkFunc(func(context.Context, *notifier.Notification) error { return nil })
	}
	n, err := notifier.New(d.client("notifier"), cfg, notifier.Options{Logger: quiet, Sinks: sinks})
	require.NoError(t, err)
	require.NoError(t, n.Start(d.ctx))
	t.Cleanup(func() { _ = n.Stop(context.Background()) })

	// A refund's tool call: the shipped route sends it to the e-mail sink.
	agent := d.client("agent")
	s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: "run-1", Agent: "refunds"},
		Interrupts: []subjects.Interrupt{{ID: "ask", Reason: subjects.ReasonToolCall, ToolCallID: "call-1",
			Approvers: []string{"ada"}}}}
	data, err := json.Marshal(s)
	require.NoError(t, err)
	subject, err := agent.Namespace().Suspended("refunds", "run-1")
	require.NoError(t, err)
	_, err = agent.Publish(d.ctx, subject, data, "run-1:0", nil)
	require.NoError(t, err)
	var note *notifier.Notification
	select {
	case note = <-mails:
	case <-time.After(20 * time.Second):
		t.Fatal("ada was not notified")
	}
	require.Len(t, note.Decide, 1)
	require.Len(t, note.Decide[0].Links, 1, "ada's links")
	pair := note.Decide[0].Links[0]
	assert.Equal(t, "ada", pair.Approver)
	return strings.Replace(pair.ApproveURL, "https://interlock.example.com", srv.URL, 1)
}

// TestAttackReplacedRecordPutBackWhenALinkIsOpened: an answer the server
// stored over run-1's record made ada's one-click link answer "run not
// found" until some input of the run reached the coordinator; nothing
// but her click would, and it could not. The gateway now audits a read
// that meets such an answer, and the coordinator, filing that, puts the
// record's latest copy back: the page shown again decides.
func TestAttackReplacedRecordPutBackWhenALinkIsOpened(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	srv := startLinkGateway(t, d)
	approve := notifiedLink(t, d, srv)
	d.handled()
	billing := d.attacker("agent_billing")
	require.NoError(t, billing.nc.PublishRequest("$JS.API.CONSUMER.INFO.INTERLOCK_WORK.worker_billing",
		"$KV.interlock_runs.run-1", nil))
	require.NoError(t, billing.nc.Flush())
	foreignRecord(t, d, "run-1")

	resp, err := http.Get(approve)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the page of a record the gateway cannot read")
	auditor := processor.NewClient(d.client("auditor"))
	require.Eventually(t, func() bool {
		_, err := auditor.Run(d.ctx, "run-1")
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, "the record put back once the gateway audited the read")
	refused := false
	for _, ev := range d.events("run-1") {
		refused = refused || ev.Type == subjects.EventAccessRefused && strings.Contains(ev.Detail, "not a write of the coordinator's")
	}
	assert.True(t, refused, "the read is audited on the run")

	resp, err = http.PostForm(approve, nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	rec, err := auditor.Run(d.ctx, "run-1")
	require.NoError(t, err)
	require.NotNil(t, rec.Interrupts[0].Decision)
	assert.Equal(t, "ada", rec.Interrupts[0].Decision.Approver)
}
