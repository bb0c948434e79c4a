package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/processor"
	"github.com/interlockhq/interlock/processor/chat/slack"
	"github.com/interlockhq/interlock/processor/coordinator"
	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/processor/policy"
	"github.com/interlockhq/interlock/subjects"
)

// TestQuorumThroughTheGateway: an interrupt that needs two approvals of a
// gated call, decided through the API and a link. A vote on a stale
// digest is refused in words; the first vote answers vote_recorded with
// what remains; the listing and the run show the votes so far, who is
// still needed and the call's arguments; the link page shows them too and
// binds its vote to the digest it showed; the second vote resolves the
// interrupt and the replay gets both votes.
func TestQuorumThroughTheGateway(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	args := map[string]any{"amount": 12400, "to": "ACME"}
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada", "bob", "carol"}, "Message": "Pay ACME?",
		"Approvals": 2, "Tool": "pay_invoice", "Args": args})
	digest, err := subjects.CallDigest("pay_invoice", json.RawMessage(`{"amount":12400,"to":"ACME"}`))
	require.NoError(t, err)
	stale, err := subjects.CallDigest("pay_invoice", json.RawMessage(`{"amount":99,"to":"ACME"}`))
	require.NoError(t, err)

	// A vote cast on other arguments than the interrupt's is refused.
	status, out := e.call("POST", decisionPath(run, id), "ada-token", []byte(`{"status":"resolved","callDigest":"`+stale+`"}`))
	require.Equal(t, http.StatusConflict, status, out)
	assert.Equal(t, string(subjects.CodeCallMismatch), out["code"])

	// The first vote is recorded, and the answer says what remains.
	status, out = e.call("POST", decisionPath(run, id), "ada-token", []byte(`{"status":"resolved","callDigest":"`+digest+`"}`))
	require.Equal(t, http.StatusOK, status, out)
	v := out["verdict"].(map[string]any)
	assert.Equal(t, "vote_recorded", v["outcome"])
	tally := v["tally"].(map[string]any)
	assert.EqualValues(t, 1, tally["approvals"])
	assert.EqualValues(t, 2, tally["approvalsNeeded"])
	assert.Equal(t, []any{"bob", "carol"}, tally["waitingOn"])

	// The same person voting twice is refused with its code.
	status, out = e.call("POST", decisionPath(run, id), "ada-token", []byte(`{"status":"resolved","decisionId":"again"}`))
	require.Equal(t, http.StatusConflict, status, out)
	assert.Equal(t, string(subjects.CodeAlreadyVoted), out["code"])

	// The listing shows the votes so far, the tally and the call.
	status, out = e.call("GET", "/v1/interrupts", "bob-token", nil)
	require.Equal(t, http.StatusOK, status, out)
	items := out["interrupts"].([]any)
	require.Len(t, items, 1)
	item := items[0].(map[string]any)
	assert.EqualValues(t, 1, item["tally"].(map[string]any)["approvals"])
	assert.Equal(t, []any{"bob", "carol"}, item["tally"].(map[string]any)["waitingOn"])
	votes := item["votes"].([]any)
	require.Len(t, votes, 1)
	assert.Equal(t, "ada", votes[0].(map[string]any)["approver"])
	assert.Equal(t, digest, votes[0].(map[string]any)["callDigest"])
	assert.Equal(t, digest, item["call"].(map[string]any)["digest"])
	assert.Equal(t, map[string]any{"amount": 12400.0, "to": "ACME"}, item["call"].(map[string]any)["arguments"])
	status, out = e.call("GET", "/v1/runs/"+run, "bob-token", nil)
	require.Equal(t, http.StatusOK, status, out)
	assert.EqualValues(t, 1, out["tallies"].(map[string]any)[id].(map[string]any)["approvals"])

	// The link page shows the call, the votes and what remains, and binds
	// the vote to the digest it showed.
	link := e.linkFor(run, id, links.Approve, "carol", time.Hour)
	status, body := e.page("GET", link, nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `name="callDigest" value="`+digest+`"`)
	assert.Contains(t, body, "1 of 2 approvals; waiting on bob, carol")
	assert.Contains(t, body, "ada approved at ")
	assert.Regexp(t, `<th scope="row">amount</th><td><code>12400</code></td>`, body)
	// A page shown before the arguments changed: the vote is not counted,
	// and the page says why.
	status, body = e.page("POST", link, url.Values{"callDigest": {stale}})
	assert.Equal(t, http.StatusConflict, status, body)
	assert.Contains(t, body, "your vote was not counted")
	status, body = e.page("POST", link, url.Values{"callDigest": {digest}})
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "You approved as carol. The run continues.")

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rec, err := e.client.Wait(ctx, run, processor.Finished)
	require.NoError(t, err)
	require.Equal(t, subjects.RunCompleted, rec.Status, string(rec.Error))
	d := rec.Interrupts[0].Decision
	require.NotNil(t, d)
	var who []string
	for _, v := range d.Votes {
		who = append(who, fmt.Sprintf("%s %s %t %s", v.Approver, v.Status, v.CallDigest == digest, v.Via))
	}
	assert.Equal(t, []string{"ada resolved true gateway", "carol resolved true link"}, who)
}

// TestLinkVoteRecorded: a link vote that does not settle the interrupt
// says it is recorded and what the request still waits for.
func TestLinkVoteRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada", "bob", "carol"}, "Message": "Deploy?", "Approvals": 2})
	status, body := e.page("POST", e.linkFor(run, id, links.Approve, "carol", time.Hour), nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, "Your vote (approved as carol) is recorded. The request still waits: 1 of 2 approvals; waiting on ada, bob.")
	assert.Contains(t, body, "vote_recorded")
}

// TestSlackQuorumCard: a card of an interrupt that needs two approvals
// says how many it has; a click is a vote whose ephemeral answer says what
// remains, the message keeps its buttons and shows the vote; a vote cast
// elsewhere updates the message too (the follower reads vote_recorded);
// the deciding vote shows the outcome with every vote.
func TestSlackQuorumCard(t *testing.T) {
	t.Parallel()
	e := newSlackEnv(t)
	blocks := func(i int) string {
		raw, _ := json.Marshal(e.fake.Messages()[i].Message.Blocks)
		return string(raw)
	}

	// A click is a vote.
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada", "bob"}, "Message": "refund?", "Approvals": 2,
		"Tool": "refund", "Args": map[string]any{"amount": 5}})
	e.card(run, id)
	assert.Contains(t, blocks(0), "0 of 2 approvals; waiting on ada, bob")
	assert.Contains(t, blocks(0), "amount", "the gated call's arguments")
	status, _ := e.click("T0TEAM", "U0ADA", slack.ActionApprove, run, id, "vote")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "Your vote (approved as ada) is recorded. The request still waits: 1 of 2 approvals; waiting on bob.",
		e.ephemeral("vote"))
	got := e.responses("vote", 2)
	require.True(t, got[0].ReplaceOriginal)
	raw, _ := json.Marshal(got[0].Blocks)
	assert.Contains(t, string(raw), "1 of 2 approvals; waiting on bob")
	assert.Contains(t, string(raw), "ada approved at ")
	assert.Contains(t, string(raw), slack.ActionApprove, "the buttons stay for the others")

	// A vote elsewhere updates the message; the deciding one shows the
	// outcome and every vote.
	run2, id2 := e.suspend(map[string]any{"Approvers": []string{"ada", "bob"}, "Message": "deploy?", "Approvals": 2})
	e.card(run2, id2)
	i := len(e.fake.Messages()) - 1
	status, out := e.call(http.MethodPost, decisionPath(run2, id2), "ada-token", []byte(`{"status":"resolved"}`))
	require.Equal(t, http.StatusOK, status, out)
	require.Eventually(t, func() bool { return e.fake.Messages()[i].Updates > 0 }, 10*time.Second, 10*time.Millisecond)
	assert.Contains(t, blocks(i), "1 of 2 approvals; waiting on bob")
	assert.Contains(t, blocks(i), slack.ActionApprove, "still waiting: buttons kept")
	status, out = e.call(http.MethodPost, decisionPath(run2, id2), "bob-token", []byte(`{"status":"resolved"}`))
	require.Equal(t, http.StatusOK, status, out)
	require.Eventually(t, func() bool { return strings.Contains(blocks(i), "Approved* by bob") }, 10*time.Second, 10*time.Millisecond)
	assert.Contains(t, blocks(i), "2 of 2 approvals")
	assert.Contains(t, blocks(i), "ada approved at ")
	assert.Contains(t, blocks(i), "bob approved at ")
	assert.NotContains(t, blocks(i), slack.ActionApprove, "decided: the buttons are gone")
}

// Attack: an operator rule forbids link and chat decisions of deploys
// (oneClickLinks: false, chatDecisions: false). The agent asked for
// neither; the coordinator writes them into the record, and the gateway,
// which proves the channel, enforces them: no links are minted, a link
// signed anyway decides nothing (links_off), the Slack card has no
// buttons and a click decides nothing (chat_off); the inbox and the API
// still decide.
func TestOperatorRuleForbidsLinksAndChat(t *testing.T) {
	t.Parallel()
	set, err := policy.Parse("policies.yaml", []byte(`
rules:
  - name: prod-deploys
    match: 'tool == "deploy"'
    action: require
    chatDecisions: false
    oneClickLinks: false
`))
	require.NoError(t, err)
	e := newSlackEnvCo(t, func(c *coordinator.Config) { c.Policies = set })
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada"}, "Message": "deploy?", "Tool": "deploy",
		"Args": map[string]any{"env": "prod"}})
	rec, err := e.client.Run(context.Background(), run)
	require.NoError(t, err)
	require.False(t, rec.Interrupts[0].LinksAllowed(), "the rule is in the record")

	reply := e.mintLinks(run, id, "ada-mail")
	assert.Equal(t, subjects.CodeLinksOff, reply.Code, reply.Detail)
	status, body := e.page("POST", e.linkFor(run, id, links.Approve, "ada", time.Hour), url.Values{})
	assert.Equal(t, http.StatusForbidden, status, body)
	assert.Contains(t, body, "may not be decided with a link")
	e.refusals(run, subjects.CodeLinksOff, 2)

	c := e.card(run, id)
	raw, _ := json.Marshal(c.Message.Blocks)
	assert.NotContains(t, string(raw), slack.ActionApprove, "no buttons on the card")
	e.click("T0TEAM", "U0ADA", slack.ActionApprove, run, id, "off")
	assert.Contains(t, e.ephemeral("off"), "may not be decided from chat")
	e.refusals(run, subjects.CodeChatOff, 1)
	e.undecided(run)

	status, out := e.call("POST", decisionPath(run, id), "ada-token", []byte(`{"status":"resolved"}`))
	require.Equal(t, http.StatusOK, status, out)
}

// Attack: bob may read a run because one of its interrupts is his, not
// ada's interrupt beside it, whose policy names who is waited on: the
// run's tallies show bob nothing of hers.
func TestTalliesWithheld(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run, _ := e.suspend(map[string]any{"Approvers": []string{"ada", "carol"}, "Approvals": 2, "Message": "pay?",
		"Second": []string{"bob"}})
	rec, err := e.client.Run(context.Background(), run)
	require.NoError(t, err)
	require.Len(t, rec.Interrupts, 2)
	status, out := e.call("GET", "/v1/runs/"+run, "bob-token", nil)
	require.Equal(t, http.StatusOK, status, out)
	assert.Nil(t, out["tallies"], "bob reads no tally of ada's interrupt: %v", out["tallies"])
	status, out = e.call("GET", "/v1/runs/"+run, "ada-token", nil)
	require.Equal(t, http.StatusOK, status, out)
	assert.Len(t, out["tallies"], 1)
}

// TestWithdrawThroughTheGateway: where the policy allows changes, a voter
// takes its vote back with withdraw; the answer says what remains, and a
// second withdrawal has nothing to take back (no_vote, 409).
func TestWithdrawThroughTheGateway(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	run, id := e.suspend(map[string]any{"Approvers": []string{"ada", "bob"}, "Approvals": 2, "AllowChange": true, "Message": "ship?"})
	status, out := e.call("POST", decisionPath(run, id), "ada-token", []byte(`{"status":"resolved"}`))
	require.Equal(t, http.StatusOK, status, out)
	status, out = e.call("POST", decisionPath(run, id), "ada-token", []byte(`{"withdraw":true}`))
	require.Equal(t, http.StatusOK, status, out)
	v := out["verdict"].(map[string]any)
	assert.Equal(t, "vote_recorded", v["outcome"])
	assert.EqualValues(t, 0, v["tally"].(map[string]any)["approvals"])
	status, out = e.call("POST", decisionPath(run, id), "ada-token", []byte(`{"withdraw":true}`))
	assert.Equal(t, http.StatusConflict, status, out)
	assert.Equal(t, string(subjects.CodeNoVote), out["code"])
}
