package gateway

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/interlockhq/interlock/internal/wireschema"
	"github.com/interlockhq/interlock/processor/links"
	"github.com/interlockhq/interlock/subjects"
)

// mintLinks asks the link service as a notifier does.
func (e *env) mintLinks(run, interrupt, sink string) subjects.LinkReply {
	e.t.Helper()
	req, _ := json.Marshal(subjects.LinkRequest{Version: subjects.Version, RunID: run, InterruptID: interrupt, Sink: sink})
	require.NoError(e.t, wireschema.Validate("link-request", req))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	data, err := e.nc.Request(ctx, e.nc.Namespace().LinkMint(), req)
	require.NoError(e.t, err)
	require.NoError(e.t, wireschema.Validate("link-reply", data), string(data))
	var reply subjects.LinkReply
	require.NoError(e.t, json.Unmarshal(data, &reply))
	return reply
}

// The link service mints a sink's person's links from the gateway's own
// identities (whom a sink reaches, their groups) and the run record, with
// the one authorization rule; the notifier names only the sink. Each
// refusal has its code, is audited and makes no link.
func TestLinkServiceMintsOnlyWhatItRoutes(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(c *Config) { c.LinkTTL = time.Hour })
	deadline := 30 * time.Minute
	run, id := e.suspend(map[string]any{"Groups": []string{"finance"}, "Timeout": deadline})

	// Carol is in finance (the gateway knows, the notifier does not).
	reply := e.mintLinks(run, id, "carol-dm")
	require.Empty(t, reply.Code, reply.Detail)
	require.Len(t, reply.Links, 1)
	got := reply.Links[0]
	assert.Equal(t, "carol", got.Approver)
	assert.WithinDuration(t, time.Now().Add(deadline), got.ExpiresAt, 5*time.Second, "never past the interrupt's deadline")
	l, err := e.signer.Verify(got.Approve, time.Now())
	require.NoError(t, err)
	assert.Equal(t, links.Link{Run: run, Interrupt: id, Action: links.Approve, Approver: "carol", Sink: "carol-dm", Expires: got.ExpiresAt.Unix()}, l)

	bobs, bobID := e.suspend(map[string]any{"Approvers": []string{"bob"}})
	off, offID := e.suspend(map[string]any{"Approvers": []string{"ada"}, "NoLinks": true})
	for _, tc := range []struct {
		run, id, sink string
		code          subjects.Code
	}{
		{run, id, "team-chat", subjects.CodeLinkNotRouted},
		{bobs, bobID, "ada-mail", subjects.CodeNotAllowed},
		{off, offID, "ada-mail", subjects.CodeLinksOff},
	} {
		reply := e.mintLinks(tc.run, tc.id, tc.sink)
		assert.Equal(t, tc.code, reply.Code, "%s/%s via %s: %s", tc.run, tc.id, tc.sink, reply.Detail)
		assert.Empty(t, reply.Links)
		e.refusals(tc.run, tc.code, 1)
	}
	// A run or interrupt not in the record is one not recorded yet: ask
	// again, not audited (notifier TestPersonalLinksAfterCoordinatorLag).
	for _, tc := range [][2]string{{run, "nope"}, {"no-such-run", id}} {
		reply := e.mintLinks(tc[0], tc[1], "ada-mail")
		assert.Equal(t, subjects.CodeUnavailable, reply.Code, "%s/%s: %s", tc[0], tc[1], reply.Detail)
		assert.Empty(t, reply.Links)
	}

	// Once decided, no more links; the ones made still decide once.
	status, body := e.page("POST", "/l/"+reply.Links[0].Approve, url.Values{})
	require.Equal(t, 200, status, body)
	assert.Contains(t, body, "as carol")
	reply = e.mintLinks(run, id, "ada-mail")
	assert.Equal(t, subjects.CodeAlreadyDecided, reply.Code)
	e.refusals(run, subjects.CodeAlreadyDecided, 1)

	// A request that is not one is refused as malformed.
	data, err := e.nc.Request(context.Background(), e.nc.Namespace().LinkMint(), []byte(`{"version":1,"runId":"a.b"}`))
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(data), string(subjects.CodeMalformed)), string(data))
}
