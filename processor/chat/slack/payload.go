package slack

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/interlockhq/interlock/subjects"
)

// Interaction types the gateway handles.
const (
	TypeBlockActions   = "block_actions"
	TypeViewSubmission = "view_submission"
)

// Action ids of the buttons on an interrupt's message.
const (
	ActionApprove = "interlock_approve"
	ActionDeny    = "interlock_deny"
	ActionAnswer  = "interlock_answer"
	// ActionInbox is the "Open in inbox" link button; Slack opens it.
	ActionInbox = "interlock_inbox"
	// CallbackAnswer is the callback id of the "Answer…" modal.
	CallbackAnswer = "interlock_answer"
)

// ErrPayload: the body is not an interaction payload this adapter reads.
var ErrPayload = errors.New("slack interaction payload not understood")

// Interaction is what Slack posts to the interactivity URL (the form field
// payload), with the fields Interlock reads.
type Interaction struct {
	Type string `json:"type"`
	Team struct {
		ID string `json:"id"`
		// EnterpriseID is set in an Enterprise Grid org.
		EnterpriseID string `json:"enterprise_id"`
	} `json:"team"`
	Enterprise *struct {
		ID string `json:"id"`
	} `json:"enterprise"`
	User struct {
		ID     string `json:"id"`
		TeamID string `json:"team_id"`
		Name   string `json:"username"`
	} `json:"user"`
	TriggerID   string `json:"trigger_id"`
	ResponseURL string `json:"response_url"`
	Container   struct {
		ChannelID string `json:"channel_id"`
		MessageTS string `json:"message_ts"`
	} `json:"container"`
	Channel struct {
		ID string `json:"id"`
	} `json:"channel"`
	Message struct {
		TS string `json:"ts"`
	} `json:"message"`
	Actions []struct {
		ActionID string `json:"action_id"`
		BlockID  string `json:"block_id"`
		Value    string `json:"value"`
	} `json:"actions"`
	View *View `json:"view"`
}

// View is a modal as Slack sends it back on submission.
type View struct {
	ID              string `json:"id"`
	CallbackID      string `json:"callback_id"`
	PrivateMetadata string `json:"private_metadata"`
	State           struct {
		// Values are by block id, then action id.
		Values map[string]map[string]StateValue `json:"values"`
	} `json:"state"`
}

// StateValue is one input's value in a submitted modal.
type StateValue struct {
	Type           string  `json:"type"`
	Value          *string `json:"value"`
	SelectedOption *struct {
		Value string `json:"value"`
	} `json:"selected_option"`
}

// ParseInteraction reads the form-encoded body Slack posts (its payload
// field). Call it only once the request is verified.
func ParseInteraction(body []byte) (*Interaction, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("%w: the body is not form-encoded: %v", ErrPayload, err)
	}
	raw := form.Get("payload")
	if raw == "" {
		return nil, fmt.Errorf("%w: no payload field", ErrPayload)
	}
	return ParsePayload([]byte(raw))
}

// ParsePayload reads an interaction payload itself (JSON): the form field
// of an HTTP request, or the payload of a Socket Mode envelope.
func ParsePayload(raw []byte) (*Interaction, error) {
	var in Interaction
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("%w: payload is not JSON: %v", ErrPayload, err)
	}
	if in.Type == "" || in.User.ID == "" {
		return nil, fmt.Errorf("%w: no type or no user", ErrPayload)
	}
	return &in, nil
}

// EnterpriseID is the Enterprise Grid org the interaction came from, if any.
func (in *Interaction) EnterpriseID() string {
	if in.Enterprise != nil && in.Enterprise.ID != "" {
		return in.Enterprise.ID
	}
	return in.Team.EnterpriseID
}

// UserTeam is the workspace the clicking user belongs to: the user's own
// team (in a Slack Connect channel, the other organisation's), else the
// payload's team.
func (in *Interaction) UserTeam() string {
	if in.User.TeamID != "" {
		return in.User.TeamID
	}
	return in.Team.ID
}

// Ref names an interrupt; it is what a button's value or a modal's metadata
// carries, signed by the gateway (Seal). It grants nothing: who may decide
// comes from the clicking user.
type Ref struct {
	Run       string `json:"run"`
	Interrupt string `json:"interrupt"`
	// Channel and TS locate the message the modal was opened from, so the
	// submission can update it.
	Channel string `json:"channel,omitempty"`
	TS      string `json:"ts,omitempty"`
}

// Value names r in words and records: "<run>/<interrupt>" (a button's
// value is Seal.Value).
func (r Ref) Value() string { return r.Run + "/" + r.Interrupt }

// ParseRef reads "<run>/<interrupt>".
func ParseRef(v string) (Ref, error) {
	run, in, ok := strings.Cut(v, "/")
	if !ok {
		return Ref{}, fmt.Errorf("%w: value %q does not name a run and an interrupt", ErrPayload, v)
	}
	r := Ref{Run: run, Interrupt: in}
	return r, r.validate()
}

func (r Ref) validate() error {
	if err := subjects.ValidateToken("run id", r.Run); err != nil {
		return fmt.Errorf("%w: %w", ErrPayload, err)
	}
	if err := subjects.ValidateToken("interrupt id", r.Interrupt); err != nil {
		return fmt.Errorf("%w: %w", ErrPayload, err)
	}
	return nil
}

// Clicked is the first action of a block_actions interaction: its id, the
// button's value as sent (read with Seal.Open) and the message it was
// clicked on.
func (in *Interaction) Clicked() (action, value string, on Posted, err error) {
	if len(in.Actions) == 0 {
		return "", "", Posted{}, fmt.Errorf("%w: block_actions without an action", ErrPayload)
	}
	a := in.Actions[0]
	on = Posted{Channel: in.Container.ChannelID, TS: in.Container.MessageTS}
	if on.Channel == "" {
		on.Channel = in.Channel.ID
	}
	if on.TS == "" {
		on.TS = in.Message.TS
	}
	return a.ActionID, a.Value, on, nil
}

// Blocks are the ids of the input blocks of a submitted view, sorted;
// AnswerBlock when it has none.
func (v *View) Blocks() []string {
	out := make([]string, 0, len(v.State.Values))
	for k := range v.State.Values {
		out = append(out, k)
	}
	if len(out) == 0 {
		return []string{AnswerBlock}
	}
	sort.Strings(out)
	return out
}
