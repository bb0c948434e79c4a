package notifier

import (
	"bytes"
	"encoding/json"
	"fmt"
	htmltemplate "html/template"
	"strings"
	texttemplate "text/template"
	"time"

	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/subjects"
)

// Notification is one message to one sink: the suspension, how to decide
// each interrupt, and the text rendered from the route's templates.
type Notification struct {
	// Key is stable across retries and restarts: the idempotency key
	// receivers drop repeats by.
	Key   string `json:"idempotencyKey"`
	Route string `json:"route"`
	Sink  string `json:"sink"`
	// Kind says what the notification is about: new (a new suspension),
	// reminder, escalated (the deadline moved, more approvers) or expired.
	Kind string `json:"kind"`
	// Detail says more about a notice, such as the new deadline.
	Detail     string              `json:"detail,omitempty"`
	Suspension subjects.Suspension `json:"suspension"`
	Decide     []Decide            `json:"decide"`
	Subject    string              `json:"subject"`
	Text       string              `json:"text"`
	HTML       string              `json:"-"`
	// TraceParent continues the run's W3C trace in the request to the sink.
	TraceParent string `json:"-"`
}

// Decide tells a person how to answer one interrupt.
type Decide struct {
	subjects.Interrupt
	ApproveCommand string `json:"approveCommand"`
	DenyCommand    string `json:"denyCommand"`
	// InboxURL links to the interrupt on the HTTP gateway, when configured.
	InboxURL string `json:"inboxUrl,omitempty"`
	// Links are one-click decision links, one pair per approver the
	// interrupt names (or one anonymous pair when it names none).
	Links []LinkPair `json:"links,omitempty"`
}

// LinkPair is a signed approve link and deny link for one approver.
type LinkPair struct {
	Approver   string `json:"approver,omitempty"`
	ApproveURL string `json:"approveUrl"`
	DenyURL    string `json:"denyUrl"`
}

// templateData is what templates see.
type templateData struct {
	Kind, Detail           string
	Agent, RunID, ThreadID string
	Pass                   int
	Input                  string
	Interrupts             []Decide
}

const defaultSubject = `[interlock] {{if eq .Kind "reminder"}}reminder: {{else if eq .Kind "escalated"}}escalated: {{end}}` +
	`{{if eq .Kind "expired"}}nobody decided in time for {{.Agent}} on run {{.RunID}}{{else}}{{.Agent}} is waiting for a decision on run {{.RunID}}{{end}}`

const defaultText = `{{if eq .Kind "expired"}}Nobody decided in time: run {{.RunID}} of agent {{.Agent}} went on without an approval ({{.Detail}}).
{{else}}{{if eq .Kind "reminder"}}Reminder: still waiting. {{else if eq .Kind "escalated"}}Escalated to you: {{end}}Agent {{.Agent}} is blocked: run {{.RunID}} waits for a person.{{with .Detail}} ({{.}}){{end}}
{{end}}
{{range .Interrupts}}
* {{if .Message}}{{.Message}}{{else}}(no message){{end}}
  reason: {{.Reason}}{{with .ToolCallID}}, tool call {{.}}{{end}}
  interrupt: {{.ID}}{{with .ExpiresAt}}
  expires: {{.Format "2006-01-02 15:04:05 MST"}}{{end}}{{with .Approvers}}
  who may decide: {{join . ", "}}{{end}}
{{if ne $.Kind "expired"}}
  approve: {{.ApproveCommand}}
  deny:    {{.DenyCommand}}{{with .InboxURL}}
  open:    {{.}}{{end}}{{range .Links}}
  {{with .Approver}}as {{.}}: {{end}}approve {{.ApproveURL}}
  {{with .Approver}}as {{.}}: {{end}}deny    {{.DenyURL}}{{end}}{{end}}
{{end}}`

const defaultHTML = `<p>{{if eq .Kind "expired"}}Nobody decided in time: run <code>{{.RunID}}</code> of agent <b>{{.Agent}}</b> went on without an approval.{{else}}{{if eq .Kind "reminder"}}Reminder: still waiting. {{else if eq .Kind "escalated"}}Escalated to you: {{end}}Agent <b>{{.Agent}}</b> is blocked: run <code>{{.RunID}}</code> waits for a person.{{end}}{{with .Detail}} ({{.}}){{end}}</p>
{{range .Interrupts}}<div style="margin:1em 0;padding:.5em 1em;border-left:3px solid #c60">
<p><b>{{if .Message}}{{.Message}}{{else}}(no message){{end}}</b><br>
reason: {{.Reason}}{{with .ToolCallID}}, tool call <code>{{.}}</code>{{end}}<br>
interrupt: <code>{{.ID}}</code>{{with .ExpiresAt}}<br>expires: {{.Format "2006-01-02 15:04:05 MST"}}{{end}}</p>
{{if ne $.Kind "expired"}}<p>Approve: <code>{{.ApproveCommand}}</code><br>Deny: <code>{{.DenyCommand}}</code></p>
{{with .InboxURL}}<p><a href="{{.}}">Open in the Interlock inbox</a></p>{{end}}{{range .Links}}
<p>{{with .Approver}}{{.}}: {{end}}<a href="{{.ApproveURL}}">Approve</a> · <a href="{{.DenyURL}}">Deny</a></p>{{end}}{{end}}</div>
{{end}}`

type templates struct {
	subject, text *texttemplate.Template
	html          *htmltemplate.Template
}

var funcs = map[string]any{"join": strings.Join}

func parseTemplates(t Templates) (*templates, error) {
	pick := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	var out templates
	var err error
	if out.subject, err = texttemplate.New("subject").Funcs(funcs).Parse(pick(t.Subject, defaultSubject)); err != nil {
		return nil, fmt.Errorf("templates.subject: %w", err)
	}
	if out.text, err = texttemplate.New("text").Funcs(funcs).Parse(pick(t.Text, defaultText)); err != nil {
		return nil, fmt.Errorf("templates.text: %w", err)
	}
	if out.html, err = htmltemplate.New("html").Funcs(funcs).Parse(pick(t.HTML, defaultHTML)); err != nil {
		return nil, fmt.Errorf("templates.html: %w", err)
	}
	return &out, nil
}

func (t *templates) render(n *Notification) error {
	d := templateData{Kind: n.Kind, Detail: n.Detail, Agent: n.Suspension.Agent, RunID: n.Suspension.RunID, ThreadID: n.Suspension.ThreadID,
		Pass: n.Suspension.Pass, Input: string(n.Suspension.Input), Interrupts: n.Decide}
	var b bytes.Buffer
	if err := t.subject.Execute(&b, d); err != nil {
		return fmt.Errorf("subject template: %w", err)
	}
	n.Subject = strings.Join(strings.Fields(b.String()), " ")
	b.Reset()
	if err := t.text.Execute(&b, d); err != nil {
		return fmt.Errorf("text template: %w", err)
	}
	n.Text = b.String()
	b.Reset()
	if err := t.html.Execute(&b, d); err != nil {
		return fmt.Errorf("html template: %w", err)
	}
	n.HTML = b.String()
	return nil
}

// decideHints builds the commands and links for every interrupt.
func decideHints(cfg *Config, signer *links.Signer, s *subjects.Suspension) []Decide {
	command := cfg.Command
	if command == "" {
		command = "interlock"
	}
	if cfg.NATSURL != "" {
		command += " --nats-url " + shellQuote(cfg.NATSURL)
	}
	out := make([]Decide, 0, len(s.Interrupts))
	for _, in := range s.Interrupts {
		d := Decide{Interrupt: in}
		target := shellQuote(s.RunID) + " " + shellQuote(in.ID)
		d.ApproveCommand = command + " approve " + target
		if len(in.ResponseSchema) > 0 {
			d.ApproveCommand += " --payload " + shellQuote(examplePayload(in.ResponseSchema))
		}
		d.DenyCommand = command + " deny " + target + ` --comment "..."`
		if cfg.GatewayURL != "" {
			base := strings.TrimRight(cfg.GatewayURL, "/")
			d.InboxURL = base + "/inbox#" + s.RunID + "/" + in.ID
			if signer != nil {
				d.Links = linkPairs(signer, base, s.RunID, in, cfg.LinkTTL)
			}
		}
		out = append(out, d)
	}
	return out
}

// examplePayload is a placeholder answer shaped like the schema's top level.
func examplePayload(schema json.RawMessage) string {
	var s struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(schema, &s)
	switch s.Type {
	case "object":
		return "{...}"
	case "array":
		return "[...]"
	case "string":
		return `"..."`
	case "boolean":
		return "true"
	}
	return "<json>"
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r == ':' || r == '/' ||
			('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// linkPairs signs links for each approver in names; an interrupt open to
// anyone gets one anonymous pair, and one open only to groups gets none
// (its approvers decide in the inbox, where they log in).
func linkPairs(signer *links.Signer, base, run string, in subjects.Interrupt, ttl time.Duration) []LinkPair {
	if ttl == 0 {
		ttl = 24 * time.Hour
	}
	who := in.Approvers
	switch {
	case len(who) == 0 && len(in.ApproverGroups) > 0:
		return nil
	case len(who) == 0:
		who = []string{""}
	}
	exp := time.Now().Add(ttl)
	if in.ExpiresAt != nil && in.ExpiresAt.Before(exp) {
		exp = *in.ExpiresAt
	}
	var out []LinkPair
	for _, a := range who {
		mk := func(action string) string {
			return base + "/l/" + signer.Sign(links.Link{Run: run, Interrupt: in.ID, Action: action, Approver: a, Expires: exp.Unix()})
		}
		out = append(out, LinkPair{Approver: a, ApproveURL: mk(links.Approve), DenyURL: mk(links.Deny)})
	}
	return out
}
