package attack_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/jetstream/embedded"
	"github.com/interlockhq/interlock/jetstream/jstest"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/gateway"
	"github.com/interlockhq/interlock/processor/notifier"
	"github.com/interlockhq/interlock/subjects"
)

func TestMain(m *testing.M) {
	// The shipped config reads each password from the environment.
	// (os.Setenv, not t.Setenv: the tests run in parallel.)
	for _, u := range jstest.Users {
		os.Setenv(jstest.PasswordEnv(u), jstest.Password(u))
	}
	// deploy/notifier.yaml's secrets.
	os.Setenv("OPS_WEBHOOK_SECRET", "a-webhook-secret-for-tests")
	os.Setenv("SMTP_PASSWORD", "smtp-password")
	// The gateway's link-signing secret (--link-secret-env).
	os.Setenv(linkSecretEnv, "the-gateway-link-signing-secret")
	jstest.RaiseParallel()
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// deployment is a nats-server started from the shipped auth.conf, provisioned
// by admin, with a coordinator running as the coordinator user.
type deployment struct {
	t   *testing.T
	ctx context.Context
	srv *embedded.Server
	// nats is every client's configuration (admin provisions with it).
	nats jetstream.Config
}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	return newDeploymentWith(t, coordinator.Config{})
}

// bareDeployment is a server with deploy/nats/single.conf's users and
// nothing provisioned, to be provisioned as natsCfg says.
func bareDeployment(t *testing.T, natsCfg jetstream.Config) *deployment {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{ConfigFile: "../../deploy/nats/single.conf", DataDir: t.TempDir(),
		Port: -1, Sync: embedded.SyncInterval})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return &deployment{t: t, ctx: ctx, srv: srv, nats: natsCfg}
}

// newDeploymentWith is newDeployment with a coordinator configured as
// coCfg (its logger and ack wait set here).
func newDeploymentWith(t *testing.T, coCfg coordinator.Config) *deployment {
	t.Helper()
	return newDeploymentOf(t, coCfg, jetstream.Config{})
}

// newDeploymentOf is newDeploymentWith provisioned by admin as natsCfg
// says (its runs bucket's storage, say).
func newDeploymentOf(t *testing.T, coCfg coordinator.Config, natsCfg jetstream.Config) *deployment {
	t.Helper()
	d := bareDeployment(t, natsCfg)
	ctx := d.ctx
	// `interlock provision` as admin, the coordinator's consumers included.
	admin := d.provisioner()
	require.NoError(t, gateway.Provision(ctx, admin))
	coCfg.Logger, coCfg.AckWait = quiet, 2*time.Second
	require.NoError(t, coordinator.Provision(ctx, admin, coCfg))
	// `interlock serve --nats-url ...` as the coordinator, which may not
	// provision: it binds to what admin made.
	co := coordinator.New(d.client("coordinator"), coCfg)
	require.NoError(t, co.Start(ctx))
	t.Cleanup(func() { _ = co.Stop(context.Background()) })
	return d
}

// provisioner is admin's client as `interlock provision` uses it.
func (d *deployment) provisioner() *jetstream.Client {
	d.t.Helper()
	admin := d.client("admin")
	require.NoError(d.t, admin.Provision(d.ctx))
	return admin
}

// url is the server's URL with user's name and password in it.
func (d *deployment) url(user string) string { return jstest.As(user, d.srv.URL()) }

// client connects as user, with that user's own inbox prefix.
func (d *deployment) client(user string) *jetstream.Client {
	d.t.Helper()
	c, err := jetstream.Dial(d.ctx, jetstream.DialConfig{URL: d.url(user), Name: user,
		InboxPrefix: subjects.InboxPrefix(user)}, d.nats)
	require.NoError(d.t, err, user)
	d.t.Cleanup(c.Close)
	return c
}

// attacker is a raw nats.go connection as user, the way an attacker holding
// that user's credentials would connect, recording the permission
// violations the server reports.
type attacker struct {
	nc *nats.Conn
	js nats.JetStreamContext
	mu sync.Mutex
	// errs are the asynchronous errors the server sent.
	errs []error
}

func (d *deployment) attacker(user string) *attacker {
	d.t.Helper()
	a := &attacker{}
	nc, err := nats.Connect(d.url(user), nats.CustomInboxPrefix(subjects.InboxPrefix(user)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			a.mu.Lock()
			a.errs = append(a.errs, err)
			a.mu.Unlock()
		}))
	require.NoError(d.t, err, user)
	d.t.Cleanup(nc.Close)
	a.nc = nc
	a.js, err = nc.JetStream(nats.MaxWait(2 * time.Second))
	require.NoError(d.t, err)
	return a
}

// answer stores body on carrier, a subject of a's own in a stream that
// allows direct gets (INTERLOCK_AGUI for an AG-UI subject, INTERLOCK_RUNS
// otherwise), with message id id, and has the server send a direct get's
// answer of it to the subject to: with the server's headers, or with none
// when bare (the request's "no_hdr"). The answer carries id, so a carrier
// in the stream that captures to would be dropped as a repeat.
func (a *attacker) answer(t *testing.T, carrier, id string, body []byte, to string, bare bool) {
	t.Helper()
	_, err := a.js.PublishMsg(&nats.Msg{Subject: carrier, Data: body, Header: nats.Header{nats.MsgIdHdr: {id}}})
	require.NoError(t, err)
	stream := "INTERLOCK_RUNS"
	if strings.HasPrefix(carrier, "interlock.agui.") {
		stream = "INTERLOCK_AGUI"
	}
	var req []byte
	if bare {
		req = []byte(`{"no_hdr":true}`)
	}
	require.NoError(t, a.nc.PublishRequest("$JS.API.DIRECT.GET."+stream+"."+carrier, to, req))
	require.NoError(t, a.nc.Flush())
}

// refused waits until the server has reported a permission violation
// naming what.
func (a *attacker) refused(t *testing.T, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, e := range a.errs {
			if errors.Is(e, nats.ErrPermissionViolation) && strings.Contains(e.Error(), what) {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "no permission violation for %s", what)
}

// suspend publishes, as the agent user, a suspension of run whose one
// interrupt only approver may decide, and waits until it is recorded.
func (d *deployment) suspend(agent *jetstream.Client, run, approver string) {
	d.t.Helper()
	d.publishSuspension(agent, run, approver)
	_, err := processor.NewClient(d.client("auditor")).Wait(d.ctx, run, processor.Suspended)
	require.NoError(d.t, err)
	d.handled()
}

// handled waits until the coordinator has acknowledged every outcome
// stored: it handles one after its record is written (the pending index,
// the events, a read of the record), and a test that changes the record
// under it races that read.
func (d *deployment) handled() {
	d.t.Helper()
	admin := d.attacker("admin")
	require.Eventually(d.t, func() bool {
		info, err := admin.js.ConsumerInfo("INTERLOCK_RUNS", "coordinator_runs")
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, 20*time.Second, 10*time.Millisecond, "the coordinator handled the outcomes")
}

// publishSuspension publishes, as agent, the refunds agent's first
// suspension of run, one question for approver, without waiting for it to
// be recorded.
func (d *deployment) publishSuspension(agent *jetstream.Client, run, approver string) {
	d.t.Helper()
	s := subjects.Suspension{PassRef: subjects.PassRef{Version: 1, RunID: run, Agent: "refunds"},
		Interrupts: []subjects.Interrupt{{ID: "ask", Reason: "confirmation", Approvers: []string{approver}}}}
	data, err := json.Marshal(s)
	require.NoError(d.t, err)
	subject, err := agent.Namespace().Suspended("refunds", run)
	require.NoError(d.t, err)
	_, err = agent.Publish(d.ctx, subject, data, run+":0", nil)
	require.NoError(d.t, err)
}

// record is run's record, read as the auditor.
func (d *deployment) record(run string) *subjects.Run {
	d.t.Helper()
	rec, err := processor.NewClient(d.client("auditor")).Run(d.ctx, run)
	require.NoError(d.t, err)
	return rec
}

// eachRecordStorage runs attack, in parallel subtests, once with the runs
// bucket on disk and once in memory (records sealed into the trail).
func eachRecordStorage(t *testing.T, attack func(t *testing.T, d *deployment, storage jetstream.Storage)) {
	t.Helper()
	for name, storage := range map[string]jetstream.Storage{"records on disk": jetstream.FileStorage,
		"records in memory": jetstream.MemoryStorage} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			attack(t, newDeploymentOf(t, coordinator.Config{}, jetstream.Config{RecordsStorage: storage}), storage)
		})
	}
}

// events are run's audit events, read as the auditor.
func (d *deployment) events(run string) []subjects.Event {
	d.t.Helper()
	evs, err := processor.NewClient(d.client("auditor")).Events(d.ctx, run)
	require.NoError(d.t, err)
	return evs
}

// notified counts notifications per sink of the shipped notifier.yaml, and
// what reached the NATS sink's subject.
type notified struct {
	mu     sync.Mutex
	bySink map[string]int
	bus    *nats.Subscription
}

// startNotifier runs deploy/notifier.yaml as the notifier user, after admin
// provisioned its consumers. Its HTTP and e-mail sinks are replaced by
// recorders; the NATS sink is real.
func startNotifier(t *testing.T, d *deployment) *notified {
	t.Helper()
	cfg, err := notifier.LoadConfig("../../deploy/notifier.yaml")
	require.NoError(t, err)
	p, err := notifier.New(d.provisioner(), cfg, notifier.Options{Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, p.Provision(d.ctx))

	rec := &notified{bySink: map[string]int{}}
	admin := d.attacker("admin")
	rec.bus, err = admin.nc.SubscribeSync("notifications.interlock")
	require.NoError(t, err)
	require.NoError(t, admin.nc.Flush()) // subscribed before anything is notified
	sinks := map[string]notifier.Sink{}
	for _, name := range []string{"ops-webhook", "finance-slack", "approvers-mail", "audit-log"} {
		sinks[name] = notifier.SinkFunc(func(context.Context, *notifier.Notification) error {
			rec.mu.Lock()
			rec.bySink[name]++
			rec.mu.Unlock()
			return nil
		})
	}
	n, err := notifier.New(d.client("notifier"), cfg, notifier.Options{Logger: quiet, Sinks: sinks})
	require.NoError(t, err)
	require.NoError(t, n.Start(d.ctx))
	t.Cleanup(func() { _ = n.Stop(context.Background()) })
	return rec
}

// wait waits until every routed sink was told about the run.
func (rec *notified) wait(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.bySink["finance-slack"] > 0 && rec.bySink["approvers-mail"] > 0 && rec.bySink["audit-log"] > 0
	}, 20*time.Second, 20*time.Millisecond, "notified")
	_, err := rec.bus.NextMsg(20 * time.Second)
	require.NoError(t, err, "the NATS sink published")
}
