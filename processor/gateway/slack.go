package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/subjects"
)

// SlackConfig turns on the Slack interactivity endpoint,
// POST /v1/slack/interactions: clicks on the buttons of the cards the
// gateway posted and submissions of the "Answer…" form decide as the
// identity the clicking Slack user maps to (identities: slack). With a bot
// token and Channels, the gateway also serves the chat card service
// (subjects.ChatPost): it alone posts the cards, for the notifier's Slack
// sinks.
type SlackConfig struct {
	// SigningSecret is the Slack app's signing secret. Required.
	SigningSecret []byte
	// TeamID pins the workspace (T...): a request from any other, or by a
	// user of another workspace (a Slack Connect channel), is refused.
	// EnterpriseID pins an Enterprise Grid org (E...) instead. One is
	// required.
	TeamID, EnterpriseID string
	// BotToken (xoxb-...) posts the cards, opens the "Answer…" form
	// (views.open) and updates messages once decided; without it the
	// gateway posts nothing and the form is off. Only the gateway holds it.
	BotToken string
	// Channels maps each notifier Slack sink the gateway posts cards for
	// to its channel id (C...); a sink it does not list gets nothing
	// (chat_not_routed). The notifier names the sink, never the channel.
	Channels map[string]string
	// InboxURL, when set, is the gateway's public URL: cards link to the
	// interrupt in its inbox.
	InboxURL string
	// APIURL is the Web API's base; default slack.DefaultAPIURL.
	APIURL string
	// ResponseURLPrefix is what every response URL must start with;
	// default "https://hooks.slack.com/". The gateway posts nowhere else
	// on a payload's word.
	ResponseURLPrefix string
	// EmailLookup maps a Slack user no identity names (slack:) by e-mail:
	// the identities file's email, looked up with users.lookupByEmail
	// (scope users:read.email, the bot token), cached. Off by default: it
	// trusts whoever administers the workspace to set e-mail addresses.
	EmailLookup bool
	// AppToken, an app-level token (xapp-..., scope connections:write),
	// turns on Socket Mode: the gateway opens WebSocket connections to
	// Slack (apps.connections.open) and receives the clicks and forms on
	// them, with no public URL; they are handled as the endpoint's are.
	// Only the gateway holds it.
	AppToken string
	// SocketConnections is how many Socket Mode connections are kept
	// open; default 2 (Slack delivers each envelope on one of them).
	SocketConnections int
	// SocketBackoff is the first wait before a failed Socket Mode
	// connection is opened again (doubling to 30s); default 1s.
	SocketBackoff time.Duration
	// Now is the clock the five-minute window is checked against; nil:
	// time.Now.
	Now func() time.Time
}

// slackReplayPrefix keys the signatures of handled Slack requests in the
// used-links bucket (kept 30 days, far past Slack's five-minute window).
const slackReplayPrefix = "slack-"

// slackViaTag is what decisions made from Slack record as their path.
const slackViaTag = "slack"

func (c *SlackConfig) check() error {
	switch {
	case len(c.SigningSecret) < 8:
		return errors.New("slack: the signing secret is required")
	case c.TeamID == "" && c.EnterpriseID == "":
		return errors.New("slack: pin the workspace: a team id (T...) or an enterprise id (E...) is required")
	case len(c.Channels) > 0 && c.BotToken == "":
		return errors.New("slack: posting cards into channels needs the bot token")
	case c.AppToken != "" && !strings.HasPrefix(c.AppToken, "xapp-"):
		return errors.New("slack: the Socket Mode token must be an app-level token (xapp-...)")
	case c.SocketConnections < 0 || c.SocketConnections > 10:
		return fmt.Errorf("slack: %d Socket Mode connections: between 1 and 10", c.SocketConnections)
	}
	for sink, ch := range c.Channels {
		if err := subjects.ValidateToken("sink", sink); err != nil {
			return fmt.Errorf("slack: channel of sink %q: %w", sink, err)
		}
		if ch == "" {
			return fmt.Errorf("slack: sink %s maps to no channel", sink)
		}
	}
	if c.ResponseURLPrefix == "" {
		c.ResponseURLPrefix = "https://hooks.slack.com/"
	}
	return nil
}

// slackAPI is the Web API client of the bot token.
func (g *Gateway) slackAPI() *slack.Client {
	return &slack.Client{Token: g.cfg.Slack.BotToken, APIURL: g.cfg.Slack.APIURL, HTTP: &http.Client{Timeout: 5 * time.Second}}
}

// slackInteraction is Slack's interactivity endpoint. In order, before any
// of the body is parsed: the body is capped, the timestamp must be inside
// Slack's five minutes and the signature must match (constant time); then
// the request must be new (its signature is marked once: a replay inside
// the window decides nothing) and come from the pinned workspace. A click
// is answered at once (Slack waits three seconds) and decided after; the
// result goes to the click's response URL. A form submission is checked
// against its schema before the answer, so errors show in the form.
func (g *Gateway) slackInteraction(w http.ResponseWriter, r *http.Request) {
	cfg, addr := g.cfg.Slack, addressOf(r)
	if g.limited(w, r, g.logins, "", addr) {
		return
	}
	refuse := func(status int, code subjects.Code, identity, detail string) {
		g.audit(r.Context(), subjects.NoRun, code, identity, detail, addr, "slack interaction")
		writeError(w, status, code, "%s", detail)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		refuse(http.StatusRequestEntityTooLarge, subjects.CodeTooLarge, "", fmt.Sprintf("the body is over %d bytes", g.cfg.MaxBody))
		return
	}
	if err != nil {
		refuse(http.StatusBadRequest, subjects.CodeBadRequest, "", "reading the body: "+err.Error())
		return
	}
	now := time.Now
	if cfg.Now != nil {
		now = cfg.Now
	}
	sig := r.Header.Get(slack.HeaderSignature)
	if err := slack.Verify(cfg.SigningSecret, r.Header.Get(slack.HeaderTimestamp), sig, body, now()); err != nil {
		g.logins.fail(addr)
		code := subjects.CodeChatSignature
		if errors.Is(err, slack.ErrStale) {
			code = subjects.CodeChatStale
		}
		refuse(http.StatusUnauthorized, code, "", err.Error())
		return
	}
	// The signature covers the timestamp and the body: the same one again
	// is the same request again.
	sum := sha256.Sum256([]byte(sig))
	replayKey := slackReplayPrefix + hex.EncodeToString(sum[:16])
	first, err := g.slackFirst(r.Context(), replayKey, []byte(r.Header.Get(slack.HeaderTimestamp)), addr)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, subjects.CodeUnavailable, "the request could not be recorded: %v", err)
		return
	}
	if !first {
		// Answered 200 with nothing: Slack shows no error, nothing happens.
		w.WriteHeader(http.StatusOK)
		return
	}
	in, err := slack.ParseInteraction(body)
	if err != nil {
		refuse(http.StatusBadRequest, subjects.CodeBadRequest, "", err.Error())
		return
	}
	if answer := g.slackHandle(r.Context(), in, replayKey, addr); answer != nil {
		writeJSON(w, http.StatusOK, answer)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// slackFirst marks key (a Slack request or envelope) handled and reports
// whether it is new; one seen before is audited chat_replayed.
func (g *Gateway) slackFirst(ctx context.Context, key string, value []byte, addr string) (bool, error) {
	first, err := g.usedLinks.Mark(ctx, key, value)
	if err != nil || first {
		return first, err
	}
	g.audit(ctx, subjects.NoRun, subjects.CodeChatReplayed, "", "a Slack request already handled came again",
		addr, "slack interaction")
	return false, nil
}

// slackHandle is what the HTTP endpoint and Socket Mode both do with an
// interaction, once its transport has proved it Slack's (the request
// signature; the connection the app token opened) and new (replayKey
// marked once): the workspace pin, then the click or the form, with the
// same checks. It returns the body of the answer to Slack (a form's
// response_action), nil for none; a click is decided after the answer.
func (g *Gateway) slackHandle(ctx context.Context, in *slack.Interaction, replayKey, addr string) map[string]any {
	if !g.slackPinned(in) {
		detail := fmt.Sprintf("Slack user %s of workspace %s (team %s, enterprise %q) is outside the pinned workspace",
			in.User.ID, in.UserTeam(), in.Team.ID, in.EnterpriseID())
		g.audit(ctx, subjects.NoRun, subjects.CodeChatWorkspace, "", detail, addr, slackRequest(in))
		g.slackLater(func(ctx context.Context) {
			g.slackEphemeral(ctx, in, "This workspace cannot decide Interlock requests here. Nothing was decided.")
		})
		return nil
	}
	switch in.Type {
	case slack.TypeBlockActions:
		g.slackLater(func(ctx context.Context) { g.slackAction(ctx, in, replayKey, addr) })
	case slack.TypeViewSubmission:
		return g.slackSubmission(ctx, in, replayKey, addr)
	}
	return nil
}

// slackRequest names an interaction for the audit trail.
func slackRequest(in *slack.Interaction) string {
	s := "slack " + in.Type
	if len(in.Actions) > 0 {
		s += " " + in.Actions[0].ActionID
	}
	return s
}

// slackPinned reports whether in comes from the pinned workspace: the
// payload's team and the user's own team are the pinned team, or the
// payload's enterprise is the pinned org.
func (g *Gateway) slackPinned(in *slack.Interaction) bool {
	cfg := g.cfg.Slack
	if cfg.EnterpriseID != "" {
		return in.EnterpriseID() == cfg.EnterpriseID
	}
	return in.Team.ID == cfg.TeamID && in.UserTeam() == cfg.TeamID
}

// slackLater runs f after the answer to Slack, bounded by the gateway's
// decision timeout; Close waits for it.
func (g *Gateway) slackLater(f func(ctx context.Context)) {
	g.background.Add(1)
	go func() {
		defer g.background.Done()
		ctx, cancel := context.WithTimeout(g.base, g.cfg.Timeout+5*time.Second)
		defer cancel()
		f(ctx)
	}()
}

// slackEphemeral tells the clicking user alone, through the click's
// response URL (only one that starts with the configured prefix).
func (g *Gateway) slackEphemeral(ctx context.Context, in *slack.Interaction, text string) {
	g.slackRespond(ctx, in, slack.Response{ResponseType: "ephemeral", Text: text})
}

// slackTell tells the user alone what became of their click or form:
// through its response URL, or, where it has none (a submitted form), as
// an ephemeral message in the card's channel.
func (g *Gateway) slackTell(ctx context.Context, in *slack.Interaction, channel, text string) {
	switch {
	case in.ResponseURL != "":
		g.slackEphemeral(ctx, in, text)
	case channel != "" && g.cfg.Slack.BotToken != "":
		if err := g.slackAPI().PostEphemeral(ctx, channel, in.User.ID, text); err != nil {
			g.cfg.Logger.Warn("slack ephemeral message not delivered", "channel", channel, "error", err)
		}
	}
}

func (g *Gateway) slackRespond(ctx context.Context, in *slack.Interaction, resp slack.Response) {
	if in.ResponseURL == "" {
		return
	}
	if !strings.HasPrefix(in.ResponseURL, g.cfg.Slack.ResponseURLPrefix) {
		g.cfg.Logger.Warn("slack response URL outside the allowed prefix; not answered", "prefix", g.cfg.Slack.ResponseURLPrefix)
		return
	}
	if err := g.slackAPI().Respond(ctx, in.ResponseURL, resp); err != nil {
		g.cfg.Logger.Warn("slack response not delivered", "error", err)
	}
}

// slackTarget is the interrupt a click or a form names, with the identity
// deciding it, once every check passed: the user maps to an identity, the
// interrupt exists and waits, allows chat decisions, and the identity may
// decide it (authz.Decide) and, on an interrupt with a policy, vote on it
// (authz.Vote: not the run's requester, unless the policy allows it). Otherwise it says why in words and audits the
// refusal.
func (g *Gateway) slackTarget(ctx context.Context, in *slack.Interaction, ref slack.Ref, addr string) (
	*subjects.Run, subjects.InterruptState, approvers.Identity, string) {
	request := slackRequest(in) + " " + ref.Value()
	id, ok := g.slackIdentity(ctx, in.UserTeam(), in.User.ID)
	if !ok {
		g.audit(ctx, ref.Run, subjects.CodeChatUnknownUser, "",
			fmt.Sprintf("Slack user %s of team %s maps to no identity", in.User.ID, in.UserTeam()), addr, request)
		return nil, subjects.InterruptState{}, id, "Your Slack user is not linked to an Interlock identity, so you cannot " +
			"decide here. Nothing was decided. An operator links you in the identities file (slack: {team: " +
			in.UserTeam() + ", user: " + in.User.ID + "})."
	}
	rec, err := g.readRun(ctx, ref.Run, id.Name, addr, request)
	switch {
	case errors.Is(err, processor.ErrRunNotFound):
		g.audit(ctx, ref.Run, subjects.CodeUnknownRun, id.Name, "no such run", addr, request)
		return nil, subjects.InterruptState{}, id, "This request does not exist (any more). Nothing was decided."
	case err != nil:
		return nil, subjects.InterruptState{}, id, "Interlock could not read the request (" + err.Error() + "). Try again."
	}
	i := slices.IndexFunc(rec.Interrupts, func(s subjects.InterruptState) bool { return s.ID == ref.Interrupt })
	if i < 0 {
		g.audit(ctx, ref.Run, subjects.CodeUnknownInterrupt, id.Name, "the run has no such interrupt", addr, request)
		return nil, subjects.InterruptState{}, id, "This request does not exist (any more). Nothing was decided."
	}
	st := rec.Interrupts[i]
	if err := authz.Decide(st.Interrupt, id); err != nil {
		// Say nothing more of the request to someone who may not decide it.
		g.audit(ctx, ref.Run, subjects.CodeNotAllowed, id.Name, err.Error(), addr, request)
		return nil, st, id, fmt.Sprintf("You (%s) may not decide this request. Nothing was decided.", id.Name)
	}
	if st.Decision != nil {
		g.audit(ctx, ref.Run, subjects.CodeAlreadyDecided, id.Name, "the interrupt is decided", addr, request)
		return rec, st, id, alreadyDecided(st)
	}
	if !st.ChatAllowed() {
		g.audit(ctx, ref.Run, subjects.CodeChatOff, id.Name, "the interrupt forbids chat decisions", addr, request)
		return nil, st, id, "This request may not be decided from chat. Decide it in the inbox. Nothing was decided."
	}
	if st.Policy != nil {
		// The coordinator refuses the requester's vote too; saying so now
		// spares them a form whose answer would count for nothing.
		if err := authz.Vote(st.Interrupt, id, rec.Requester); errors.Is(err, authz.ErrRequesterExcluded) {
			g.audit(ctx, ref.Run, subjects.CodeRequesterExcluded, id.Name, err.Error(), addr, request)
			return nil, st, id, fmt.Sprintf("You (%s) started this run, and its policy does not let the requester "+
				"approve or deny it. Nothing was decided.", id.Name)
		}
	}
	return rec, st, id, ""
}

// alreadyDecided says who decided st what, and when.
func alreadyDecided(st subjects.InterruptState) string {
	d := slack.DecidedOf(st, "")
	text := "Already decided: " + strings.ToLower(d.Status)
	if d.By != "" {
		text = "Already decided by " + d.By + ": " + strings.ToLower(d.Status)
	}
	if !d.At.IsZero() {
		text += " at " + d.At.UTC().Format("15:04 UTC, 2 Jan")
	}
	return text + ". Nothing changed."
}

// slackAction handles a click, after Slack has its answer. The click
// counts only when the button's value is one the gateway signed for the
// action clicked and the channel it came from, on a message the gateway
// recorded posting for that interrupt; else chat_forged, audited, nothing
// decided. The action is the clicked button's action_id, which the value
// is bound to.
func (g *Gateway) slackAction(ctx context.Context, in *slack.Interaction, replayKey, addr string) {
	action, value, on, err := in.Clicked()
	if err == nil && action == slack.ActionInbox {
		return // a link to the inbox: Slack opened it
	}
	var ref slack.Ref
	if err == nil {
		ref, err = g.seal.Open(value, action, on.Channel)
	}
	if err == nil {
		err = g.slackPosted(ctx, ref, on)
		if err != nil && !errors.Is(err, slack.ErrForged) {
			g.slackEphemeral(ctx, in, "Interlock could not check this card ("+err.Error()+"). Click again: it counts once.")
			return
		}
	}
	if errors.Is(err, slack.ErrForged) {
		g.slackForged(ctx, in, ref, addr, err)
		return
	}
	if err != nil {
		g.audit(ctx, subjects.NoRun, subjects.CodeBadRequest, "", err.Error(), addr, slackRequest(in))
		g.slackEphemeral(ctx, in, "Interlock did not understand that click. Nothing was decided.")
		return
	}
	ref.Channel, ref.TS = on.Channel, on.TS
	rec, st, id, refusal := g.slackTarget(ctx, in, ref, addr)
	if refusal != "" {
		if rec != nil && st.Decision != nil {
			// The message may still show buttons: make it follow.
			g.slackRespond(ctx, in, slack.Response{ReplaceOriginal: true, Text: refusal,
				Blocks: g.slackCard(rec, st).Message().Blocks})
		}
		g.slackEphemeral(ctx, in, refusal)
		return
	}
	switch action {
	case slack.ActionApprove, slack.ActionDeny:
	case slack.ActionAnswer:
		g.slackOpenForm(ctx, in, ref, rec, st, addr)
		return
	default:
		g.audit(ctx, ref.Run, subjects.CodeBadRequest, id.Name, "unknown action "+action, addr, slackRequest(in))
		g.slackEphemeral(ctx, in, "Interlock did not understand that click. Nothing was decided.")
		return
	}
	status := subjects.StatusResolved
	if action == slack.ActionDeny {
		status = subjects.StatusCancelled
	}
	g.slackDecide(ctx, in, ref, st, id, processor.DecisionRequest{RunID: ref.Run, InterruptID: ref.Interrupt,
		Status: status, Approver: id.Name, Via: slackViaTag, DecisionID: replayKey})
}

// slackDecide publishes a decision as id and tells the user how it went:
// on success the message shows who decided what, without buttons.
func (g *Gateway) slackDecide(ctx context.Context, in *slack.Interaction, ref slack.Ref, st subjects.InterruptState,
	id approvers.Identity, req processor.DecisionRequest) {
	dctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	v, err := g.client.Decide(dctx, req)
	var rej *processor.RejectionError
	switch {
	case errors.As(err, &rej):
		text := inWords(v.Code, v.Detail)
		if v.Code == subjects.CodeSchemaMismatch && len(st.ResponseSchema) > 0 {
			text = "This request needs an answer: use Answer… . Nothing was decided."
		}
		g.slackTell(ctx, in, ref.Channel, text)
		return
	case err != nil:
		g.slackTell(ctx, in, ref.Channel, "The decision could not be sent or confirmed ("+err.Error()+"). Click again: it counts once.")
		return
	}
	rec, err := g.client.Run(ctx, ref.Run)
	if err == nil {
		if i := slices.IndexFunc(rec.Interrupts, func(s subjects.InterruptState) bool { return s.ID == ref.Interrupt }); i >= 0 {
			st = rec.Interrupts[i]
		}
	}
	if v.Outcome == subjects.OutcomeVoteRecorded {
		g.slackVoted(ctx, in, ref, rec, st, id, req, v)
		return
	}
	if st.Decision == nil {
		// The record lags the verdict: show the decision just made.
		now := time.Now().UTC()
		st.Decision, st.DecidedAt = &subjects.Decision{Status: req.Status, Approver: id.Name}, &now
	}
	card := g.slackCard(rec, st)
	card.Decided.Via = slackViaTag
	msg := card.Message()
	if in.ResponseURL != "" {
		g.slackRespond(ctx, in, slack.Response{ReplaceOriginal: true, Text: msg.Text, Blocks: msg.Blocks})
	} else if ref.Channel != "" && ref.TS != "" && g.cfg.Slack.BotToken != "" {
		if err := g.slackAPI().Update(ctx, ref.Channel, ref.TS, msg); err != nil {
			g.cfg.Logger.Warn("slack message not updated", "run", ref.Run, "error", err)
		}
	}
	verb := strings.ToLower(slack.StatusWord(st.Interrupt, subjects.Decision{Status: req.Status, Approver: id.Name}))
	text := "You " + verb + " as " + id.Name + ". The run continues."
	if v.Outcome == subjects.OutcomeDuplicate {
		text = "This was already " + verb + " as " + id.Name + "; it counts once."
	}
	g.slackTell(ctx, in, ref.Channel, text)
}

// slackVoted answers a click that was a vote and left the interrupt
// waiting (protocol version 2): the message shows the votes so far, its
// buttons kept for the others, and the voter is told what remains.
func (g *Gateway) slackVoted(ctx context.Context, in *slack.Interaction, ref slack.Ref, rec *subjects.Run,
	st subjects.InterruptState, id approvers.Identity, req processor.DecisionRequest, v subjects.Verdict) {
	if rec != nil && ref.Channel != "" {
		msg := g.drawCard(rec, st, ref.Channel).Message()
		if in.ResponseURL != "" {
			g.slackRespond(ctx, in, slack.Response{ReplaceOriginal: true, Text: msg.Text, Blocks: msg.Blocks})
		} else if ref.TS != "" && g.cfg.Slack.BotToken != "" {
			if err := g.slackAPI().Update(ctx, ref.Channel, ref.TS, msg); err != nil {
				g.cfg.Logger.Warn("slack message not updated", "run", ref.Run, "error", err)
			}
		}
	}
	verb := strings.ToLower(slack.StatusWord(st.Interrupt, subjects.Decision{Status: req.Status, Approver: id.Name}))
	text := "Your vote (" + verb + " as " + id.Name + ") is recorded. The request still waits: " + remainingWords(v.Tally) + "."
	g.slackTell(ctx, in, ref.Channel, text)
}

// slackCard is the card of st in rec (rec may be nil: the card then has
// only what st says).
func (g *Gateway) slackCard(rec *subjects.Run, st subjects.InterruptState) slack.Card {
	agent, run := "", ""
	if rec != nil {
		agent, run = rec.Agent, rec.RunID
	}
	c := slack.CardOf(agent, run, st.Interrupt, "")
	c.Decided = slack.DecidedOf(st, "")
	c.Tally, c.Votes = cardVotes(rec, st)
	return c
}

// slackOpenForm opens the "Answer…" form of st (views.open, within the
// click's three seconds): one field per property of its responseSchema.
func (g *Gateway) slackOpenForm(ctx context.Context, in *slack.Interaction, ref slack.Ref, rec *subjects.Run,
	st subjects.InterruptState, addr string) {
	if len(st.ResponseSchema) == 0 {
		g.slackEphemeral(ctx, in, "This request takes no answer; approve or deny it.")
		return
	}
	if g.cfg.Slack.BotToken == "" {
		g.slackEphemeral(ctx, in, "Answer this request in the inbox: this gateway has no Slack bot token to open the form.")
		return
	}
	view, err := slack.Modal(st.Message, st.ResponseSchema, g.seal.Metadata(ref))
	if err != nil {
		g.slackEphemeral(ctx, in, "This answer does not fit a Slack form; answer it in the inbox. ("+err.Error()+")")
		return
	}
	if err := g.slackAPI().OpenView(ctx, in.TriggerID, view); err != nil {
		g.cfg.Logger.Warn("slack form not opened", "run", rec.RunID, "error", err)
		g.slackEphemeral(ctx, in, "The form could not be opened ("+err.Error()+"). Click Answer… again.")
	}
}

// slackSubmission handles a submitted "Answer…" form. The answer is read
// back and checked against the interrupt's responseSchema with the
// coordinator's validator before Slack's three seconds are out: errors are
// shown in the form (response_action: errors). A good answer closes the
// form and is decided after.
func (g *Gateway) slackSubmission(ctx context.Context, in *slack.Interaction, replayKey, addr string) map[string]any {
	if in.View == nil || in.View.CallbackID != slack.CallbackAnswer {
		return nil
	}
	ref, err := g.seal.OpenMetadata(in.View.PrivateMetadata)
	if errors.Is(err, slack.ErrForged) {
		g.slackForged(ctx, in, ref, addr, err)
		return map[string]any{"response_action": "errors", "errors": map[string]string{in.View.Blocks()[0]: slackForgedText}}
	}
	if err != nil {
		g.audit(ctx, subjects.NoRun, subjects.CodeBadRequest, "", err.Error(), addr, slackRequest(in))
		return map[string]any{"response_action": "errors",
			"errors": map[string]string{slack.AnswerBlock: "Interlock did not understand this form."}}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, st, id, refusal := g.slackTarget(ctx, in, ref, addr)
	fields := slack.Fields(st.ResponseSchema)
	if refusal != "" {
		// Errors must name a block the form has: the refused user may not
		// see the schema, so take the form's own.
		fields = in.View.Blocks()
		return map[string]any{"response_action": "errors", "errors": map[string]string{fields[0]: refusal}}
	}
	payload, errs := slack.Answer(st.ResponseSchema, in.View)
	if len(errs) == 0 {
		if err := g.schemas.CheckAnswer(st.Interrupt, subjects.StatusResolved, payload); err != nil {
			// The same words the coordinator would refuse with; they name
			// rules and places, never the value.
			_, detail, _ := strings.Cut(err.Error(), ": ")
			errs = slack.ErrorsAt(detail, fields)
		}
	}
	if len(errs) > 0 {
		return map[string]any{"response_action": "errors", "errors": errs}
	}
	g.slackLater(func(ctx context.Context) {
		g.slackDecide(ctx, in, ref, st, id, processor.DecisionRequest{RunID: ref.Run, InterruptID: ref.Interrupt,
			Status: subjects.StatusResolved, Payload: payload, Approver: id.Name, Via: slackViaTag, DecisionID: replayKey})
	})
	return nil
}

// slackForgedText is what a click or form on a forged card is told.
const slackForgedText = "Interlock did not post this message for this request, so it decides nothing. Nothing was decided."

// cardWait bounds how long a click waits for its card's record: a card is
// recorded just after Slack answers its post, and a click may come first.
const cardWait = 5 * time.Second

// slackPosted checks that on is a card the gateway posted for ref's
// interrupt, into a sink that shows buttons (ErrForged otherwise),
// re-reading the card list for up to cardWait while it is not there.
func (g *Gateway) slackPosted(ctx context.Context, ref slack.Ref, on slack.Posted) error {
	wait, cancel := context.WithTimeout(ctx, cardWait)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		cards, _, err := g.slackCards(wait, ref.Run, ref.Interrupt)
		j := slices.IndexFunc(cards, func(c postedCard) bool { return c.Posted == on })
		switch {
		case err == nil && j >= 0 && cards[j].Buttons:
			return nil
		case err == nil && j >= 0:
			return fmt.Errorf("%w: message %s in %s was posted for %s where its sink shows no buttons", slack.ErrForged, on.TS, on.Channel, ref.Value())
		case err != nil && wait.Err() == nil:
			return err
		}
		select {
		case <-tick.C:
		case <-wait.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w: message %s in %s is not a card the gateway posted for %s", slack.ErrForged, on.TS, on.Channel, ref.Value())
		}
	}
}

// slackForged audits a click or form on a message the gateway did not
// draw for what it names, as the identity the user maps to (if any), and
// tells the user.
func (g *Gateway) slackForged(ctx context.Context, in *slack.Interaction, ref slack.Ref, addr string, err error) {
	id, _ := g.slackIdentity(ctx, in.UserTeam(), in.User.ID)
	g.audit(ctx, ref.Run, subjects.CodeChatForged, id.Name, err.Error(), addr, slackRequest(in)+" "+ref.Value())
	if in.Type == slack.TypeBlockActions {
		g.slackEphemeral(ctx, in, slackForgedText)
	}
}
