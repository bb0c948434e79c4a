package slack

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Block Kit limits (Slack's published ones) the cards keep within.
const (
	MaxBlocks      = 50
	MaxSectionText = 3000
	MaxHeaderText  = 150
	MaxButtonValue = 2000
)

// Card is one interrupt as a Slack message: what it asks, who may decide
// and by when, and, while it waits, the buttons to decide; once decided,
// who decided what and when, without buttons.
type Card struct {
	Title    string
	Agent    string
	Run      string
	Question string
	Reason   string
	Tool     string
	// Arguments are the tool's arguments (JSON), shown as code.
	Arguments    json.RawMessage
	WhoMayDecide string
	ExpiresAt    *time.Time
	// Interrupt is its id; Buttons puts Approve and Deny on it (with
	// Answer, for a question with a responseSchema, "Answer…" and Deny),
	// each button's value made by Sign (the gateway's Seal). Without Sign
	// the card has no buttons to decide with.
	Interrupt string
	Buttons   bool
	Answer    bool
	Sign      func(action string) string
	// InboxURL links to the interrupt in the inbox.
	InboxURL string
	// Decided, once set, replaces the buttons with what was decided.
	Decided *Decided
	// Tally says where the votes on an interrupt with a policy stand
	// (protocol version 2), as "1 of 2 approvals; waiting on bob"; Votes
	// are the votes so far, or every vote of the final decision.
	Tally string
	Votes []Vote
}

// Vote is one vote as a card shows it.
type Vote struct {
	By     string
	Status string // "approved", "denied", "withdrew"
	At     time.Time
}

// Decided is an interrupt's decision as a card shows it.
type Decided struct {
	By     string
	Status string // "approved", "denied", "answered", "expired", ...
	At     time.Time
	Via    string
}

// Escape escapes text for mrkdwn: Slack's three control characters.
func Escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func mrkdwn(s string) Block  { return Block{"type": "mrkdwn", "text": s} }
func plain(s string) Block   { return Block{"type": "plain_text", "text": s, "emoji": false} }
func section(s string) Block { return Block{"type": "section", "text": mrkdwn(s)} }
func truncate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// Fits reports whether the card's question and arguments fit Slack's block
// limits; a card that does not is shown as TooLarge.
func (c Card) Fits() bool {
	return len(c.questionText()) <= MaxSectionText && len(c.argumentsText()) <= MaxSectionText &&
		len(Ref{Run: c.Run, Interrupt: c.Interrupt}.Value())+32 <= MaxButtonValue
}

func (c Card) questionText() string {
	q := c.Question
	if q == "" {
		q = "(no message)"
	}
	return "*" + Escape(q) + "*"
}

func (c Card) argumentsText() string {
	if len(c.Arguments) == 0 {
		return ""
	}
	return "```" + Escape(string(c.Arguments)) + "```"
}

// Message renders the card. A card whose question does not fit Slack's
// limits says so and links to the inbox, with no buttons: nobody decides
// what they cannot read.
func (c Card) Message() Message {
	title := c.Title
	if title == "" {
		title = "Agent " + c.Agent + " is waiting for a decision"
	}
	blocks := []Block{{"type": "header", "text": plain(truncate(title, MaxHeaderText))}}
	fits := c.Fits()
	if fits {
		blocks = append(blocks, section(c.questionText()))
	} else {
		blocks = append(blocks, section("*The question is too large to show in Slack.* Read and decide it in the inbox."))
	}
	fields := []Block{mrkdwn("*Agent*\n" + Escape(c.Agent)), mrkdwn("*Run*\n`" + Escape(c.Run) + "`")}
	if c.Tool != "" {
		fields = append(fields, mrkdwn("*Tool*\n`"+Escape(truncate(c.Tool, 500))+"`"))
	}
	if c.Reason != "" {
		fields = append(fields, mrkdwn("*Reason*\n"+Escape(truncate(c.Reason, 500))))
	}
	fields = append(fields, mrkdwn("*Who may decide*\n"+Escape(truncate(c.WhoMayDecide, 1000))))
	if c.ExpiresAt != nil {
		fields = append(fields, mrkdwn("*Deadline*\n"+deadline(*c.ExpiresAt)))
	}
	blocks = append(blocks, Block{"type": "section", "fields": fields})
	if fits && len(c.Arguments) > 0 {
		blocks = append(blocks, section("*Arguments*\n"+c.argumentsText()))
	}
	if c.Tally != "" || len(c.Votes) > 0 {
		blocks = append(blocks, Block{"type": "context", "elements": []Block{mrkdwn(c.votesText())}})
	}
	var buttons []Block
	switch {
	case c.Decided != nil:
		d := c.Decided
		text := fmt.Sprintf("*%s* by %s", Escape(d.Status), Escape(d.By))
		if d.By == "" {
			text = "*" + Escape(d.Status) + "*"
		}
		if !d.At.IsZero() {
			text += " at " + deadline(d.At)
		}
		if d.Via != "" {
			text += " (via " + Escape(d.Via) + ")"
		}
		blocks = append(blocks, Block{"type": "context", "elements": []Block{mrkdwn(text)}})
	case c.Buttons && fits && c.Sign != nil:
		// A question with a responseSchema is approved with an answer:
		// "Answer…" opens its form instead of a bare Approve.
		if c.Answer {
			buttons = append(buttons, button(ActionAnswer, "Answer…", c.Sign(ActionAnswer), "primary", nil))
		} else {
			buttons = append(buttons, button(ActionApprove, "Approve", c.Sign(ActionApprove), "primary",
				confirm("Approve?", "Approve this request as yourself. The agent continues.", "Approve")))
		}
		buttons = append(buttons, button(ActionDeny, "Deny", c.Sign(ActionDeny), "danger",
			confirm("Deny?", "Deny this request as yourself. The agent is told no.", "Deny")))
	}
	if c.InboxURL != "" && c.Decided == nil {
		buttons = append(buttons, Block{"type": "button", "action_id": ActionInbox, "url": c.InboxURL, "text": plain("Open in inbox")})
	}
	if len(buttons) > 0 {
		blocks = append(blocks, Block{"type": "actions", "block_id": "interlock_decide", "elements": buttons})
	}
	// Slack reads the message's text as mrkdwn too, and shows it in
	// notifications: escaped like the blocks.
	text := Escape(truncate(title+": "+c.Question, 300))
	return Message{Text: text, Blocks: blocks}
}

// votesText is the tally and each vote, in mrkdwn.
func (c Card) votesText() string {
	var b strings.Builder
	b.WriteString("*Votes:*")
	if c.Tally != "" {
		b.WriteString(" " + Escape(c.Tally))
	}
	for _, v := range c.Votes {
		b.WriteString("\n• " + Escape(v.By) + " " + Escape(v.Status))
		if !v.At.IsZero() {
			b.WriteString(" at " + deadline(v.At))
		}
	}
	return truncate(b.String(), 2900)
}

// Date is a time as Slack shows it in the reader's own time zone, with a
// UTC fallback.
func Date(at time.Time) string { return deadline(at) }

// deadline is a time as Slack shows it in the reader's own time zone, with
// a UTC fallback.
func deadline(at time.Time) string {
	return fmt.Sprintf("<!date^%d^{date_short_pretty} {time}|%s>", at.Unix(), at.UTC().Format("2006-01-02 15:04 UTC"))
}

func button(id, text, value, style string, conf Block) Block {
	b := Block{"type": "button", "action_id": id, "text": plain(text), "value": value}
	if style != "" {
		b["style"] = style
	}
	if conf != nil {
		b["confirm"] = conf
	}
	return b
}

func confirm(title, text, yes string) Block {
	return Block{"title": plain(title), "text": plain(text), "confirm": plain(yes), "deny": plain("Cancel")}
}
