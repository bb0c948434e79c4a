package gateway

import (
	"cmp"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/subjects"
)

//go:embed web
var web embed.FS

var pages = template.Must(template.New("").ParseFS(web, "web/*.html"))

// row is one line of a key/value table on a page.
type row struct{ Key, Value string }

// page is what the link pages show.
type page struct {
	Title, Message string
	// Approver is whom a link decides as; empty for a link anyone may use.
	Approver  string
	Interrupt *subjects.InterruptState
	Action    string
	Button    string
	// About describes the request; Arguments are the tool's, one per row.
	About, Arguments []row
	// Error says in words why the last answer was refused; Detail is the
	// coordinator's detail, which the form places next to its field.
	Error, Detail string
	// Schema is the responseSchema the form is built from; Values fill it
	// (the tool's arguments, or what was sent and refused).
	Schema, Values string
	InboxURL       string
	// Decided repeats what a decision said; RunURL shows its run.
	Decided []row
	RunURL  string
	Outcome string
	// CallDigest is the digest of the call the page shows (protocol
	// version 2); the form sends it back, so the vote is bound to the
	// arguments the approver saw. Tool names the call.
	CallDigest, Tool string
	// Votes says each vote so far; Remaining what is still needed.
	Votes     []string
	Remaining string
}

func renderPage(w http.ResponseWriter, status int, name string, p page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_ = pages.ExecuteTemplate(w, name, p)
}

func refuse(w http.ResponseWriter, status int, title, message string) {
	renderPage(w, status, "message.html", page{Title: title, Message: message})
}

// static serves the pages' script and style sheet.
func static(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	types := map[string]string{"form.js": "text/javascript", "inbox.js": "text/javascript", "style.css": "text/css"}
	kind, ok := types[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	body, _ := web.ReadFile("web/" + name)
	w.Header().Set("Content-Type", kind+"; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(body)
}

// describe is the request an interrupt makes, as rows: the agent and run,
// the tool, who may decide, how long it has waited and the time left.
func describe(rec *subjects.Run, in *subjects.InterruptState, now time.Time) []row {
	suspendedAt := rec.UpdatedAt // as the pending index has it
	rows := []row{{"Agent", rec.Agent}, {"Run", rec.RunID}}
	var meta struct {
		Tool string `json:"tool"`
	}
	_ = json.Unmarshal(in.Metadata, &meta)
	if tool := cmp.Or(meta.Tool, in.ToolCallID); tool != "" {
		rows = append(rows, row{"Tool", tool})
	}
	rows = append(rows, row{"Reason", in.Reason}, row{"Who may decide", authz.WhoMayDecide(in.Interrupt)})
	if !suspendedAt.IsZero() {
		rows = append(rows, row{"Waiting since", suspendedAt.UTC().Format("15:04 UTC, 2 Jan") + " (" + roundDur(now.Sub(suspendedAt)) + ")"})
	}
	if in.ExpiresAt != nil {
		rows = append(rows, row{"Expires", expiresIn(*in.ExpiresAt, now)})
	}
	return rows
}

// expiresIn says "in 1h58m (12:52 UTC)", or when it expired.
func expiresIn(at, now time.Time) string {
	clock := at.UTC().Format("15:04 UTC")
	if !at.After(now) {
		return "expired at " + clock
	}
	return "in " + roundDur(at.Sub(now)) + " (" + clock + ")"
}

// roundDur is d to the minute ("1h58m", "3m"), or "under a minute".
func roundDur(d time.Duration) string {
	if d < time.Minute {
		return "under a minute"
	}
	s := d.Truncate(time.Minute).String()
	return strings.TrimSuffix(s, "0s")
}

// arguments are the tool's arguments (metadata.arguments) as rows, by name.
func arguments(metadata json.RawMessage) ([]row, json.RawMessage) {
	var meta struct {
		Arguments map[string]json.RawMessage `json:"arguments"`
	}
	if json.Unmarshal(metadata, &meta) != nil || len(meta.Arguments) == 0 {
		return nil, nil
	}
	keys := slices.Sorted(maps.Keys(meta.Arguments))
	rows := make([]row, 0, len(keys))
	for _, k := range keys {
		rows = append(rows, row{k, plain(meta.Arguments[k])})
	}
	raw, _ := json.Marshal(meta.Arguments)
	return rows, raw
}

// orEmpty is raw, or {} when raw is empty.
func orEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage(`{}`)
	}
	return raw
}

// plain shows a JSON value to people: a string as is, anything else as JSON.
func plain(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// answerRows are the rows of an answer: its fields for an object, else
// the value.
func answerRows(payload json.RawMessage) []row {
	var fields map[string]json.RawMessage
	if json.Unmarshal(payload, &fields) == nil && fields != nil {
		keys := slices.Sorted(maps.Keys(fields))
		rows := make([]row, 0, len(keys))
		for _, k := range keys {
			rows = append(rows, row{k, plain(fields[k])})
		}
		return rows
	}
	if len(payload) == 0 {
		return nil
	}
	return []row{{"Answer", plain(payload)}}
}

// inWords says why a decision was refused, for people.
func inWords(code subjects.Code, detail string) string {
	switch code {
	case subjects.CodeSchemaMismatch:
		return "The answer does not fit what the agent asked for. Correct the marked fields and send it again."
	case subjects.CodeNotAllowed:
		return "You may not decide this request. " + detail
	case subjects.CodeAlreadyDecided:
		return "Someone decided this already; nothing changed."
	case subjects.CodeExpired:
		return "This request has expired; it can no longer be approved."
	case subjects.CodeUnknownRun, subjects.CodeUnknownInterrupt:
		return "This request does not exist (any more)."
	case subjects.CodeCallMismatch:
		return "The call you saw is not the call this request gates (the arguments changed); your vote was not counted. Open the request again and decide on what it shows now. " + detail
	case subjects.CodeAlreadyVoted:
		return "You voted on this request already; your first vote stands. " + detail
	case subjects.CodeRequesterExcluded:
		return "You started this run, and its policy does not let the requester vote on it."
	case subjects.CodeVoteLimit:
		return "This request takes no more open votes; only a vote that decides it is accepted now. " + detail
	}
	return "The answer was not accepted: " + detail
}

// link checks a link token; on a bad one it answers and returns false.
// Every refusal is audited; a link that is not valid counts as a failed
// login of the caller's address.
func (g *Gateway) link(w http.ResponseWriter, r *http.Request) (links.Link, string, bool) {
	token := r.PathValue("token")
	if g.cfg.Links == nil {
		refuse(w, http.StatusNotFound, "Links are off", "This gateway does not serve decision links.")
		return links.Link{}, "", false
	}
	addr := addressOf(r)
	if blocked, first := g.logins.blocked(addr); blocked {
		if first {
			g.refused(r, subjects.CodeRateLimited, "", "too many links that are not valid from this address")
		}
		refuse(w, http.StatusTooManyRequests, "Too many attempts", "Too many links that are not valid came from here. Try again later.")
		return links.Link{}, "", false
	}
	l, err := g.cfg.Links.Verify(token, time.Now())
	switch {
	case errors.Is(err, links.ErrExpired):
		g.refusedRun(r, l.Run, subjects.CodeLinkExpired, l.Approver, "expired decision link")
		refuse(w, http.StatusGone, "This link has expired", err.Error()+". Decide in the inbox or with the CLI instead.")
		return l, "", false
	case err != nil:
		g.logins.fail(addr)
		g.refused(r, subjects.CodeLinkInvalid, "", "decision link with a bad signature")
		refuse(w, http.StatusBadRequest, "This link is not valid",
			"The link was changed or cut short. Open it again from the original message, or use the inbox.")
		return l, "", false
	}
	if _, known := g.cfg.Directory.Identity(l.Approver); !known {
		// Minted for someone since removed from the identities file: their
		// links stop with their tokens and sessions.
		g.refusedRun(r, l.Run, subjects.CodeNotAllowed, l.Approver, "decision link of an identity no longer in the identities file")
		refuse(w, http.StatusForbidden, "This link no longer works",
			"It was made for someone who may no longer decide here. Ask an administrator.")
		return l, "", false
	}
	if p, ok := g.cfg.Directory.LinkRecipient(l.Sink); !ok || p.Name != l.Approver {
		// Minted for a mailbox that no longer carries this approver's
		// links (turned off, say, when it was compromised): its links stop.
		g.refusedRun(r, l.Run, subjects.CodeNotAllowed, l.Approver, "decision link for sink "+l.Sink+", which no longer carries this identity's links")
		refuse(w, http.StatusForbidden, "This link no longer works",
			"Links sent where this one was sent no longer decide. Decide in the inbox instead.")
		return l, "", false
	}
	used, err := g.usedLinks.Has(r.Context(), links.ID(token))
	if err != nil {
		refuse(w, http.StatusServiceUnavailable, "Try again", err.Error())
		return l, "", false
	}
	if used {
		g.refusedRun(r, l.Run, subjects.CodeLinkUsed, l.Approver, "decision link used again")
		refuse(w, http.StatusConflict, "This link was already used",
			"A decision link works once. The decision it made stands; see the run's history.")
		return l, "", false
	}
	return l, token, true
}

// confirmLink shows what a link would do. A GET never decides: mail
// scanners that open links approve nothing.
func (g *Gateway) confirmLink(w http.ResponseWriter, r *http.Request) {
	l, token, ok := g.link(w, r)
	if !ok {
		return
	}
	g.showLink(w, r, l, token, http.StatusOK, page{})
}

// showLink renders the page of link l, with what p adds (a refusal and
// what was sent), or a page in words when the interrupt no longer waits.
func (g *Gateway) showLink(w http.ResponseWriter, r *http.Request, l links.Link, token string, status int, p page) {
	rec, err := g.readRun(r.Context(), l.Run, l.Approver, addressOf(r), requestOf(r))
	switch {
	case errors.Is(err, processor.ErrRunNotFound):
		refuse(w, http.StatusNotFound, "Run not found", "There is no such run (any more). The inbox lists what waits for you.")
		return
	case err != nil:
		refuse(w, http.StatusServiceUnavailable, "Try again", "The request could not be read ("+err.Error()+"). Reload the page.")
		return
	}
	i := slices.IndexFunc(rec.Interrupts, func(in subjects.InterruptState) bool { return in.ID == l.Interrupt })
	if i < 0 {
		refuse(w, http.StatusNotFound, "Request not found", "The run asks nothing like this. The inbox lists what waits for you.")
		return
	}
	in := &rec.Interrupts[i]
	if !g.linkMayDecide(w, r, l, in.Interrupt) {
		return
	}
	if in.Decision != nil {
		renderPage(w, http.StatusConflict, "message.html", page{Title: "Already decided", RunURL: runURL(l),
			Message: "This request was " + string(in.Decision.Status) + " by " + orAnonymous(in.Decision.Approver) + "; nothing more to do."})
		return
	}
	p.Title, p.Approver, p.Interrupt, p.Action = title(l.Action)+"?", l.Approver, in, l.Action
	p.Button, p.InboxURL = title(l.Action), runURL(l)
	p.About = describe(rec, in, time.Now())
	var args json.RawMessage
	p.Arguments, args = arguments(in.Metadata)
	if in.Call != nil {
		// The gated call's own arguments, which its digest covers.
		p.Arguments, _ = arguments(json.RawMessage(`{"arguments":` + string(orEmpty(in.Call.Arguments)) + `}`))
		p.CallDigest, p.Tool = in.Call.Digest, in.Call.Tool
	}
	p.Votes, p.Remaining = voteLines(*in), remainingWords(tallyOf(rec, i))
	if l.Action == links.Approve && len(in.ResponseSchema) > 0 {
		p.Schema = string(in.ResponseSchema)
		if p.Values == "" {
			p.Values = string(args)
		}
	}
	renderPage(w, status, "confirm.html", p)
}

// linkMayDecide reports whether l's approver may still decide in (their
// groups may have changed since the link was made: authz.Decide, the one
// rule); otherwise it refuses, audited, showing nothing of the question.
func (g *Gateway) linkMayDecide(w http.ResponseWriter, r *http.Request, l links.Link, in subjects.Interrupt) bool {
	id, _ := g.cfg.Directory.Identity(l.Approver)
	if err := authz.Decide(in, id); err != nil {
		g.refusedRun(r, l.Run, subjects.CodeNotAllowed, l.Approver, "decision link of an identity that may not decide the interrupt (now)")
		refuse(w, http.StatusForbidden, "Not accepted", inWords(subjects.CodeNotAllowed, ""))
		return false
	}
	return true
}

// runURL opens the link's interrupt, or its run once decided, in the inbox.
func runURL(l links.Link) string { return "/inbox#" + l.Run + "/" + l.Interrupt }

func title(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

func orAnonymous(s string) string {
	if s == "" {
		return "someone"
	}
	return s
}

// useLink decides what the link says, once. A refused answer shows the
// form again with the reason next to its field and what was sent.
func (g *Gateway) useLink(w http.ResponseWriter, r *http.Request) {
	l, token, ok := g.link(w, r)
	if !ok {
		return
	}
	// Whoever holds a link is not known to be its approver (a forwarded
	// mail): refused answers count against the caller's address only, never
	// against the approver's identity, which they would lock out of the API.
	addr := addressOf(r)
	if blocked, first := g.refusals.blocked(addr); blocked {
		if first {
			g.refusedRun(r, l.Run, subjects.CodeRateLimited, "", "too many refused link decisions from this address")
		}
		w.Header().Set("Retry-After", fmt.Sprint(int(g.refusals.limit.Every.Seconds())+1))
		refuse(w, http.StatusTooManyRequests, "Too many attempts", "Too many answers from here were not accepted. Try again later.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, g.cfg.MaxBody)
	if err := r.ParseForm(); err != nil {
		refuse(w, http.StatusRequestEntityTooLarge, "Too large", "The answer is too large to send.")
		return
	}
	// Links off for this interrupt (the agent's request, or an operator
	// rule the coordinator applied to the record: oneClickLinks: false):
	// no link decides it, even one minted before or signed elsewhere. A
	// record that cannot be read decides nothing (it did, unchecked); one
	// that is not there is the coordinator's to refuse (unknown_run).
	rec, err := g.readRun(r.Context(), l.Run, l.Approver, addressOf(r), requestOf(r))
	switch {
	case errors.Is(err, processor.ErrRunNotFound):
	case err != nil:
		refuse(w, http.StatusServiceUnavailable, "Try again", "The request could not be read ("+err.Error()+"). Go back and send it again.")
		return
	default:
		if i := slices.IndexFunc(rec.Interrupts, func(st subjects.InterruptState) bool { return st.ID == l.Interrupt }); i >= 0 {
			if !rec.Interrupts[i].LinksAllowed() {
				g.refusals.fail(addr)
				g.refusedRun(r, l.Run, subjects.CodeLinksOff, l.Approver, "decision link for an interrupt with one-click links off")
				refuse(w, http.StatusForbidden, "Links are off for this request",
					"This request may not be decided with a link. Decide it in the inbox or with the CLI.")
				return
			}
			if !g.linkMayDecide(w, r, l, rec.Interrupts[i].Interrupt) {
				g.refusals.fail(addr)
				return
			}
		}
	}
	req := processor.DecisionRequest{RunID: l.Run, InterruptID: l.Interrupt, Approver: l.Approver,
		DecisionID: "link-" + links.ID(token), Status: subjects.StatusCancelled, Comment: r.PostFormValue("comment"),
		Via: "link", CallDigest: r.PostFormValue("callDigest")}
	sent := strings.TrimSpace(r.PostFormValue("payload"))
	var answer json.RawMessage
	if l.Action == links.Approve {
		req.Status = subjects.StatusResolved
		if sent != "" {
			if !json.Valid([]byte(sent)) {
				g.showLink(w, r, l, token, http.StatusBadRequest, page{Values: sent,
					Error: "The answer is not valid JSON. Correct it and send it again."})
				return
			}
			answer = json.RawMessage(sent)
			req.Payload = answer
		}
	}
	ctx, cancel := contextWithTimeout(r, g.cfg.Timeout)
	defer cancel()
	v, err := g.client.Decide(ctx, req)
	var rej *processor.RejectionError
	switch {
	case errors.As(err, &rej):
		g.refusals.fail(addr)
		status, known := statusOf[v.Code]
		if !known {
			status = http.StatusBadRequest
		}
		if v.Code == subjects.CodeSchemaMismatch || v.Code == subjects.CodeSchemaBudget {
			g.showLink(w, r, l, token, status, page{Values: sent, Error: inWords(v.Code, v.Detail), Detail: v.Detail})
			return
		}
		renderPage(w, status, "message.html", page{Title: "Not accepted", Message: inWords(v.Code, v.Detail), RunURL: runURL(l)})
		return
	case err != nil:
		refuse(w, http.StatusServiceUnavailable, "Try again", "The decision could not be sent or confirmed ("+err.Error()+
			"). Go back and send it again: it counts once.")
		return
	}
	if _, err := g.usedLinks.Mark(r.Context(), links.ID(token), []byte(v.DecisionID)); err != nil {
		g.cfg.Logger.Warn("link use not recorded", "error", err)
	}
	done, verb := "Approved", "approved"
	if l.Action == links.Deny {
		done, verb = "Denied", "denied"
	}
	who := ""
	if l.Approver != "" {
		who = " as " + l.Approver
	}
	decided := answerRows(answer)
	if req.Comment != "" {
		decided = append(decided, row{"Reason", req.Comment})
	}
	msg := "You " + verb + who + ". The run continues."
	if v.Outcome == subjects.OutcomeVoteRecorded {
		msg = "Your vote (" + verb + who + ") is recorded. The request still waits: " + remainingWords(v.Tally) + "."
	}
	if v.Outcome == subjects.OutcomeDuplicate {
		msg = "This was already " + verb + who + "; it counts once."
	}
	renderPage(w, http.StatusOK, "message.html", page{Title: done, Message: msg, Decided: decided,
		Outcome: string(v.Outcome), RunURL: runURL(l)})
}
