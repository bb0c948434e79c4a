package gateway

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/subjects"
)

//go:embed web
var web embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"pretty": func(raw json.RawMessage) string {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return string(raw)
		}
		b, _ := json.MarshalIndent(v, "", "  ")
		return string(b)
	},
	"title": func(s string) string { return strings.ToUpper(s[:1]) + s[1:] },
}).ParseFS(web, "web/*.html"))

// page is what the link pages show.
type page struct {
	Title, Message string
	Run            *subjects.Run
	Interrupt      *subjects.InterruptState
	Action         string
	Token          string
	Outcome        string
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
	rec, err := g.client.Run(r.Context(), l.Run)
	if err != nil {
		refuse(w, http.StatusNotFound, "Run not found", err.Error())
		return
	}
	for i := range rec.Interrupts {
		in := &rec.Interrupts[i]
		if in.ID != l.Interrupt {
			continue
		}
		if in.Decision != nil {
			refuse(w, http.StatusConflict, "Already decided", "This interrupt was "+string(in.Decision.Status)+
				" by "+orAnonymous(in.Decision.Approver)+".")
			return
		}
		renderPage(w, http.StatusOK, "confirm.html", page{Title: title(l.Action) + "?", Run: rec, Interrupt: in,
			Action: l.Action, Token: token})
		return
	}
	refuse(w, http.StatusNotFound, "Interrupt not found", "The run has no such interrupt.")
}

func title(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

func orAnonymous(s string) string {
	if s == "" {
		return "someone"
	}
	return s
}

// useLink decides what the link says, once.
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
		refuse(w, http.StatusRequestEntityTooLarge, "Too large", err.Error())
		return
	}
	req := processor.DecisionRequest{RunID: l.Run, InterruptID: l.Interrupt, Approver: l.Approver,
		DecisionID: "link-" + links.ID(token), Status: subjects.StatusCancelled, Comment: r.PostFormValue("comment"),
		Via: "link"}
	if l.Action == links.Approve {
		req.Status = subjects.StatusResolved
		if p := strings.TrimSpace(r.PostFormValue("payload")); p != "" {
			if !json.Valid([]byte(p)) {
				refuse(w, http.StatusBadRequest, "The answer is not JSON", "Go back and correct the answer.")
				return
			}
			req.Payload = json.RawMessage(p)
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
		refuse(w, status, "Not accepted", string(v.Code)+": "+v.Detail)
		return
	case err != nil:
		refuse(w, http.StatusServiceUnavailable, "Try again", err.Error())
		return
	}
	if _, err := g.usedLinks.Mark(r.Context(), links.ID(token), []byte(v.DecisionID)); err != nil {
		g.cfg.Logger.Warn("link use not recorded", "error", err)
	}
	done := "Approved"
	if l.Action == links.Deny {
		done = "Denied"
	}
	renderPage(w, http.StatusOK, "message.html", page{Title: done, Message: "Thank you. The run continues.",
		Outcome: string(v.Outcome)})
}
