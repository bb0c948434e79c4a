package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/interlockhq/interlock/internal/textcut"
	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/subjects"
)

// defaultLinkTTL is how long a minted link lasts unless Config.LinkTTL
// says otherwise (and never past its interrupt's deadline).
const defaultLinkTTL = 24 * time.Hour

// mintQueue is the queue group gateways serve the link service in: each
// request is answered by one gateway.
const mintQueue = "interlock-gateway"

// mintParallel bounds the link requests one gateway answers at once.
const mintParallel = 32

// recordWait bounds how long a link request waits for the coordinator to
// record the suspension it is about: the notifier reads the suspension
// from the same stream as the coordinator, and may be first.
const recordWait = 3 * time.Second

// serveLinks answers the link service's requests (subjects.LinkMint) until
// the client closes or Close is called.
func (g *Gateway) serveLinks() error {
	stop, err := g.serve("link service", g.nc.Namespace().LinkMint(), func(ctx context.Context, data []byte) any {
		reply := g.mint(ctx, data)
		reply.Version = subjects.Version
		return reply
	})
	g.stopMint = stop
	return err
}

// serve answers the requests on subject, the what service's, with what
// answer returns (in JSON), each bounded by the gateway's timeout, until
// the returned stop is called; it stops nothing when serving fails.
func (g *Gateway) serve(what, subject string, answer func(ctx context.Context, data []byte) any) (func(), error) {
	base, cancelAll := context.WithCancel(context.Background())
	sub, err := g.nc.Serve(jetstream.Service{Subject: subject, Queue: mintQueue, Parallel: mintParallel,
		Answer: func(_ string, data []byte) []byte {
			ctx, cancel := context.WithTimeout(base, g.cfg.Timeout)
			defer cancel()
			out, _ := json.Marshal(answer(ctx, data))
			return out
		},
		Refused: g.replyRefused,
	})
	if err != nil {
		cancelAll()
		return func() {}, fmt.Errorf("serve the %s: %w", what, err)
	}
	return func() { sub.Unsubscribe(); cancelAll() }, nil
}

// Close stops serving the link service and ends the requests under way,
// and the work left after answering Slack (it waits for it). The HTTP side
// stops with its server.
func (g *Gateway) Close() {
	ended, end := context.WithCancel(context.Background())
	end()
	_ = g.stopListening(ended)
	if g.bridge != nil {
		ended, end := context.WithCancel(context.Background())
		end()
		_ = g.bridge.Stop(ended) // cancels the AG-UI requests under way
	}
	g.stop()
	g.background.Wait()
	g.stoppedOnce.Do(func() { close(g.stopped) })
}

// ErrStopped is the cause of the end of the gateway's work still under way
// when Stop's context ends before it finishes.
var ErrStopped = errors.New("gateway stopped")

// Stop stops serving the link service (ending the requests under way, as
// Close does) and the Slack follower (its updates under way waited for
// while ctx lasts, then cancelled), then waits while ctx lasts for the work left after
// answering Slack and for the AG-UI requests under way (agui.Bridge.Stop);
// when ctx ends first, that work is cancelled, Stop waits for the Slack
// work to return and returns an error wrapping ctx's. Shut the HTTP server
// down first (Server), so that no request starts more work.
func (g *Gateway) Stop(ctx context.Context) error {
	followed := g.stopListening(ctx)
	defer g.stoppedOnce.Do(func() { close(g.stopped) })
	bridged := followed
	if g.bridge != nil {
		bridged = errors.Join(followed, g.bridge.Stop(ctx))
	}
	done := make(chan struct{})
	go func() { g.background.Wait(); close(done) }()
	select {
	case <-done:
		g.stop()
		return bridged
	case <-ctx.Done():
		g.stop()
		<-done
		return errors.Join(bridged, fmt.Errorf("gateway: work still under way: %w", context.Cause(ctx)))
	}
}

// stopListening stops the link service, the chat card service, the
// Slack follower and the Socket Mode connections: the work that comes from
// NATS or Slack rather than from HTTP requests.
func (g *Gateway) stopListening(ctx context.Context) error {
	if g.stopMint != nil {
		g.stopMint()
	}
	if g.stopChat != nil {
		g.stopChat()
	}
	var err error
	if g.stopFollow != nil {
		// Its updates under way are waited for while ctx lasts.
		if err = g.stopFollow(ctx); err != nil {
			err = fmt.Errorf("gateway: Slack updates still under way: %w", err)
		}
	}
	if g.stopSocket != nil {
		g.stopSocket()
	}
	return err
}

// Stopped returns a channel closed once Stop or Close has returned.
func (g *Gateway) Stopped() <-chan struct{} { return g.stopped }

// mint makes the links a notifier asks for, from what the gateway holds
// itself: the sink must be one its identities file lists under an
// identity's links (the notifier's claim about whom a sink reaches counts
// for nothing), the interrupt must be pending and allow links, and that
// identity must be allowed to decide it (authz.Decide, the one rule).
// Every refusal is audited as access_refused and makes no link; a run or
// interrupt not recorded yet is answered unavailable, to be asked again.
func (g *Gateway) mint(ctx context.Context, data []byte) subjects.LinkReply {
	req, err := subjects.DecodeLinkRequest(data)
	if err != nil {
		return g.mintRefused(ctx, req, subjects.CodeOf(err), "", err.Error())
	}
	p, ok := g.cfg.Directory.LinkRecipient(req.Sink)
	if !ok {
		return g.mintRefused(ctx, req, subjects.CodeLinkNotRouted, "",
			fmt.Sprintf("sink %s reaches nobody the gateway sends links to (identities: links)", req.Sink))
	}
	// Only the notifier may ask (auth.conf), and only about suspensions it
	// read from the stream the coordinator records: a run or interrupt not
	// in the record is one not recorded yet (the coordinator is restarting
	// or behind), so the answer is unavailable, to be asked again, never a
	// refusal that would send the notification without its links.
	rec, i, err := g.interruptOf(ctx, req.RunID, req.InterruptID)
	switch {
	case errors.Is(err, processor.ErrRunNotFound):
		return subjects.LinkReply{Code: subjects.CodeUnavailable, Detail: "the run is not recorded yet"}
	case err != nil:
		return subjects.LinkReply{Code: subjects.CodeUnavailable, Detail: err.Error()}
	case i < 0:
		return subjects.LinkReply{Code: subjects.CodeUnavailable, Detail: "the interrupt is not recorded yet"}
	}
	in := rec.Interrupts[i]
	now := time.Now()
	switch {
	case in.Decision != nil:
		return g.mintRefused(ctx, req, subjects.CodeAlreadyDecided, p.Name, "the interrupt is decided")
	case rec.Status != subjects.RunSuspended:
		return g.mintRefused(ctx, req, subjects.CodeAlreadyDecided, p.Name, "the run is "+string(rec.Status)+", not waiting")
	case in.ExpiresAt != nil && !in.ExpiresAt.After(now):
		return g.mintRefused(ctx, req, subjects.CodeExpired, p.Name, "the interrupt has expired")
	case !in.LinksAllowed():
		return g.mintRefused(ctx, req, subjects.CodeLinksOff, p.Name, "the interrupt turned one-click links off")
	}
	if err := authz.Decide(in.Interrupt, p); err != nil {
		return g.mintRefused(ctx, req, subjects.CodeNotAllowed, p.Name, err.Error())
	}
	exp := now.Add(g.cfg.LinkTTL)
	if in.ExpiresAt != nil && in.ExpiresAt.Before(exp) {
		exp = *in.ExpiresAt
	}
	mk := func(action string) string {
		return g.cfg.Links.Sign(links.Link{Run: req.RunID, Interrupt: req.InterruptID, Action: action,
			Approver: p.Name, Sink: req.Sink, Expires: exp.Unix()})
	}
	g.cfg.Logger.Info("links minted", "run", req.RunID, "interrupt", req.InterruptID, "sink", req.Sink, "approver", p.Name)
	return subjects.LinkReply{Links: []subjects.MintedLink{{Approver: p.Name, Approve: mk(links.Approve),
		Deny: mk(links.Deny), ExpiresAt: time.Unix(exp.Unix(), 0).UTC()}}}
}

// mintRefused audits a refused link request and says why in the reply.
// The asker is the notifier (only its NATS user may ask), not the person
// the sink reaches, who is named in the request for the record.
func (g *Gateway) mintRefused(ctx context.Context, req subjects.LinkRequest, code subjects.Code, recipient, detail string) subjects.LinkReply {
	request := fmt.Sprintf("links.mint %s/%s via sink %s", req.RunID, req.InterruptID, req.Sink)
	if recipient != "" {
		request += " for " + recipient
	}
	g.audit(ctx, req.RunID, code, "", detail, "nats", request)
	return subjects.LinkReply{Code: code, Detail: detail}
}

// replyRefused audits a request to the link or chat card service whose
// reply subject was not an inbox (jetstream.Service): it was not answered.
func (g *Gateway) replyRefused(subject, reply string) {
	g.audit(context.Background(), subjects.NoRun, subjects.CodeReplyRefused, "",
		fmt.Sprintf("a request's reply subject %q is not an inbox (_INBOX.…): not answered", textcut.Truncate(reply, 256)),
		"", subject)
}

// audit reports a refusal as an access_refused observation about run (or
// no run), which the coordinator records in the audit trail, and logs it. Neither holds a secret: no token, no
// link, no value sent.
func (g *Gateway) audit(ctx context.Context, run string, code subjects.Code, identity, detail, address, request string) {
	if subjects.ValidateToken("run id", run) != nil {
		run = subjects.NoRun
	}
	ev := subjects.Event{Version: subjects.Version, Type: subjects.EventAccessRefused, RunID: run, At: time.Now().UTC(),
		Code: code, Detail: detail, Identity: identity, Address: address, Request: request}
	g.cfg.Logger.Info("access refused", "code", code, "identity", identity, "address", address, "request", request,
		"detail", detail)
	subject, err := g.nc.Namespace().Observed(run, subjects.EventAccessRefused)
	if err != nil {
		return
	}
	data, _ := json.Marshal(ev)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := g.nc.PublishAll(ctx, jetstream.OutMsg{Subject: subject, Data: data, MsgID: uuid.NewString()}); err != nil {
		g.cfg.Logger.Warn("access refusal not recorded", "code", code, "error", err)
	}
}
