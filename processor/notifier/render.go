package notifier

import (
	"bytes"
	"encoding/json"
	"fmt"
	htmltemplate "html/template"
	"math"
	"reflect"
	"slices"
	"strings"
	texttemplate "text/template"
	"time"

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
	Kind Kind `json:"kind"`
	// Headline says it in one line: "reminder: 10 minutes left", "expired:
	// cancelled at 12:52 UTC, nothing to decide".
	Headline string `json:"headline"`
	// Detail says more about a notice, such as the new deadline.
	Detail string `json:"detail,omitempty"`
	// Notice is the coordinator's notice behind a reminder, escalation or
	// expiry; absent for a new suspension.
	Notice     *NoticeRef          `json:"notice,omitempty"`
	Suspension subjects.Suspension `json:"suspension"`
	// Decide has one entry per interrupt. On an expiry, which closed them,
	// the entries carry no commands and no links: there is nothing to
	// decide.
	Decide  []Decide `json:"decide"`
	Subject string   `json:"subject"`
	Text    string   `json:"text"`
	HTML    string   `json:"-"`
	// TraceParent continues the run's W3C trace in the request to the sink.
	TraceParent string `json:"-"`
}

// NoticeRef names the notice a reminder, escalation or expiry comes from.
type NoticeRef struct {
	// Seq counts notices of this kind about the interrupt.
	Seq int `json:"seq"`
	// Timer is the timer that fired; it tells any two notices apart.
	Timer string    `json:"timer"`
	At    time.Time `json:"at"`
	// Status, on an expiry, is what it applied: cancelled or resolved.
	Status subjects.Status `json:"status,omitempty"`
}

// Open reports whether the notification asks for a decision: everything
// but an expiry does.
func (n *Notification) Open() bool { return n.Kind != KindExpired }

// Decide tells a person how to answer one interrupt.
type Decide struct {
	subjects.Interrupt
	ApproveCommand string `json:"approveCommand,omitempty"`
	DenyCommand    string `json:"denyCommand,omitempty"`
	// InboxURL links to the interrupt in the gateway's inbox, where people
	// log in, when gateway_url is configured.
	InboxURL string `json:"inboxUrl,omitempty"`
	// Links are one-click decision links. Only a personal sink carries
	// them, and only its person's: a link decides without a login.
	Links []LinkPair `json:"links,omitempty"`
	// Quorum says, for an interrupt with a policy (protocol version 2),
	// how many approvals it needs and how many it has when the notifier
	// knows: "0 of 2 approvals" for a new suspension, "2 approvals
	// needed" on a notice (the votes so far are in the inbox and `interlock
	// show`: the notifier does not read run records).
	Quorum string `json:"quorum,omitempty"`
}

// quorum is Decide.Quorum of in in a notification of kind; tally is
// where its votes stand, from a version 2 reminder or escalation (nil
// otherwise).
func quorum(in subjects.Interrupt, kind Kind, tally *subjects.Tally) string {
	p := in.Policy
	if p == nil {
		return ""
	}
	var s string
	switch {
	case kind == KindExpired:
		return fmt.Sprintf("%d approvals were needed", p.NeedApprovals())
	case tally != nil:
		s = fmt.Sprintf("%d of %d approvals", tally.Approvals, tally.ApprovalsNeeded)
		if tally.DenialsNeeded > 1 || tally.Denials > 0 {
			s += fmt.Sprintf(", %d of %d denials", tally.Denials, tally.DenialsNeeded)
		}
		if len(tally.WaitingOn) > 0 {
			s += "; waiting on " + strings.Join(tally.WaitingOn, ", ")
		}
		if !p.AllowRequester {
			s += "; whoever started the run may not vote"
		}
		return s
	case kind == KindNew:
		s = fmt.Sprintf("0 of %d approvals", p.NeedApprovals())
	default:
		s = fmt.Sprintf("%d approvals needed", p.NeedApprovals())
	}
	if p.NeedDenials() > 1 {
		s += fmt.Sprintf(", %d denials refuse", p.NeedDenials())
	}
	who := append(slices.Clone(in.Approvers), groupNames(in.ApproverGroups)...)
	if len(who) > 0 {
		s += " from " + strings.Join(who, ", ")
	}
	if !p.AllowRequester {
		s += "; whoever started the run may not vote"
	}
	if kind != KindNew {
		s += " (the votes so far are in the inbox)"
	}
	return s
}

func groupNames(gs []string) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = "group " + g
	}
	return out
}

// LinkPair is a signed approve link and deny link for one approver.
type LinkPair struct {
	Approver   string `json:"approver"`
	ApproveURL string `json:"approveUrl"`
	DenyURL    string `json:"denyUrl"`
}

// templateData is what templates see.
type templateData struct {
	Kind, Headline, Detail string
	// Open is false on an expiry: there is nothing left to decide.
	Open                   bool
	Agent, RunID, ThreadID string
	Pass                   int
	Input                  string
	Interrupts             []Decide
}

const defaultSubject = `[interlock] {{if eq .Kind "new"}}{{.Agent}} is waiting for a decision on run {{.RunID}}` +
	`{{else}}{{.Headline}} ({{.Agent}}, run {{.RunID}}){{end}}`

const defaultText = `{{if eq .Kind "expired"}}Nobody decided in time: run {{.RunID}} of agent {{.Agent}} no longer waits for a person.
{{.Headline}}.
{{else if eq .Kind "new"}}Agent {{.Agent}} is blocked: run {{.RunID}} waits for a person.
{{else}}{{.Headline}}. Agent {{.Agent}} is still blocked: run {{.RunID}} waits for a person.
{{end}}
{{range .Interrupts}}
* {{if .Message}}{{.Message}}{{else}}(no message){{end}}
  reason: {{.Reason}}{{with .ToolCallID}}, tool call {{.}}{{end}}
  interrupt: {{.ID}}{{with .ExpiresAt}}
  expires: {{.Format "2006-01-02 15:04:05 MST"}}{{end}}{{with .Approvers}}
  who may decide: {{join . ", "}}{{end}}{{with .Quorum}}
  votes: {{.}}{{end}}
{{if $.Open}}
  approve: {{.ApproveCommand}}
  deny:    {{.DenyCommand}}{{with .InboxURL}}
  open:    {{.}}{{end}}{{range .Links}}
  as {{.Approver}}: approve {{.ApproveURL}}
  as {{.Approver}}: deny    {{.DenyURL}}{{end}}{{end}}
{{end}}`

const defaultHTML = `<p>{{if eq .Kind "expired"}}Nobody decided in time: run <code>{{.RunID}}</code> of agent <b>{{.Agent}}</b> no longer waits for a person.<br><b>{{.Headline}}</b>.` +
	`{{else if eq .Kind "new"}}Agent <b>{{.Agent}}</b> is blocked: run <code>{{.RunID}}</code> waits for a person.` +
	`{{else}}<b>{{.Headline}}</b>. Agent <b>{{.Agent}}</b> is still blocked: run <code>{{.RunID}}</code> waits for a person.{{end}}</p>
{{range .Interrupts}}<div style="margin:1em 0;padding:.5em 1em;border-left:3px solid #c60">
<p><b>{{if .Message}}{{.Message}}{{else}}(no message){{end}}</b><br>
reason: {{.Reason}}{{with .ToolCallID}}, tool call <code>{{.}}</code>{{end}}<br>
interrupt: <code>{{.ID}}</code>{{with .ExpiresAt}}<br>expires: {{.Format "2006-01-02 15:04:05 MST"}}{{end}}{{with .Quorum}}<br>votes: {{.}}{{end}}</p>
{{if $.Open}}<p>Approve: <code>{{.ApproveCommand}}</code><br>Deny: <code>{{.DenyCommand}}</code></p>
{{with .InboxURL}}<p><a href="{{.}}">Open in the Interlock inbox</a></p>{{end}}{{range .Links}}
<p>{{.Approver}}: <a href="{{.ApproveURL}}">Approve</a> · <a href="{{.DenyURL}}">Deny</a></p>{{end}}{{end}}</div>
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
	d := templateData{Kind: string(n.Kind), Headline: n.Headline, Detail: n.Detail, Open: n.Open(), Agent: n.Suspension.Agent,
		RunID: n.Suspension.RunID, ThreadID: n.Suspension.ThreadID, Pass: n.Suspension.Pass,
		Input: string(n.Suspension.Input), Interrupts: n.Decide}
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

// decideHints builds the commands and links for every interrupt of an
// open notification. personal is the one person the sink reaches (empty for
// a shared channel): only then are one-click links added, from mint (the
// gateway's link service), for the interrupts they may be able to decide.
func decideHints(cfg *Config, s *subjects.Suspension, personal string, mint func(subjects.Interrupt) []LinkPair) []Decide {
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
			d.ApproveCommand += " --payload " + shellQuote(examplePayload(in.ResponseSchema, in.Metadata))
		}
		d.DenyCommand = command + " deny " + target + ` --comment "..."`
		if personal != "" {
			// The person this notification is for decides as themselves.
			d.ApproveCommand += " --approver " + shellQuote(personal)
			d.DenyCommand += " --approver " + shellQuote(personal)
		}
		if cfg.GatewayURL != "" {
			base := strings.TrimRight(cfg.GatewayURL, "/")
			d.InboxURL = base + "/inbox#" + s.RunID + "/" + in.ID
			if personal != "" && linkFor(in, personal) {
				d.Links = mint(in)
			}
		}
		out = append(out, d)
	}
	return out
}

// closedHints lists the interrupts of a notification that asks for no
// decision, without commands or links.
func closedHints(s *subjects.Suspension) []Decide {
	out := make([]Decide, 0, len(s.Interrupts))
	for _, in := range s.Interrupts {
		out = append(out, Decide{Interrupt: in})
	}
	return out
}

// linkFor reports whether to ask the gateway for person's links to in:
// unless in turned links off or names its approvers without person and
// no groups. The notifier does not know the groups; the gateway does, and
// decides (this only spares it requests it would refuse).
func linkFor(in subjects.Interrupt, person string) bool {
	if !in.LinksAllowed() {
		return false
	}
	return len(in.Approvers) == 0 || len(in.ApproverGroups) > 0 || slices.Contains(in.Approvers, person)
}

// examplePayload is an answer that satisfies the common shapes of schema,
// as JSON: for an object, the tool's arguments (metadata.arguments) where
// property names and types match, and for required properties without one
// a first choice, the minimum, false or "". The inbox and link pages
// prefill their forms the same way; the person edits it before sending.
func examplePayload(schema, metadata json.RawMessage) string {
	var s property
	_ = json.Unmarshal(schema, &s)
	if s.Type != "object" || len(s.Properties) == 0 {
		b, _ := json.Marshal(s.initial())
		return string(b)
	}
	var meta struct {
		Arguments map[string]any `json:"arguments"`
	}
	_ = json.Unmarshal(metadata, &meta)
	out := map[string]any{}
	for name, p := range s.Properties {
		if v, ok := meta.Arguments[name]; ok && p.accepts(v) {
			out[name] = v
		} else if slices.Contains(s.Required, name) {
			out[name] = p.initial()
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// property is the part of a JSON Schema the example answer follows.
type property struct {
	Type       any                 `json:"type"`
	Enum       []any               `json:"enum"`
	Minimum    *float64            `json:"minimum"`
	Properties map[string]property `json:"properties"`
	Required   []string            `json:"required"`
}

func (p property) kind() string {
	if t, ok := p.Type.(string); ok {
		return t
	}
	return ""
}

// initial is the value a form starts with when nothing better is known.
func (p property) initial() any {
	if len(p.Enum) > 0 {
		return p.Enum[0]
	}
	switch p.kind() {
	case "number", "integer":
		if p.Minimum != nil {
			return *p.Minimum
		}
		return 0
	case "boolean":
		return false
	case "object":
		return map[string]any{}
	case "array":
		return []any{}
	}
	return ""
}

// accepts reports whether v fits p's type and choices.
func (p property) accepts(v any) bool {
	if len(p.Enum) > 0 {
		return slices.ContainsFunc(p.Enum, func(e any) bool { return reflect.DeepEqual(e, v) })
	}
	switch x := v.(type) {
	case float64:
		return p.kind() == "number" || p.kind() == "integer" && x == math.Trunc(x) || p.kind() == ""
	case string:
		return p.kind() == "string" || p.kind() == ""
	case bool:
		return p.kind() == "boolean" || p.kind() == ""
	case map[string]any:
		return p.kind() == "object" || p.kind() == ""
	case []any:
		return p.kind() == "array" || p.kind() == ""
	}
	return p.kind() == ""
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
