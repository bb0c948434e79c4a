package gateway

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/interlockhq/interlock/processor/approvers"
	"github.com/interlockhq/interlock/processor/chat/slack"
)

// Slack users found by e-mail (SlackConfig.EmailLookup): the identities
// file's email of each identity that names no Slack user is looked up with
// users.lookupByEmail, and the Slack user found decides as that identity.
// This trusts whoever administers the Slack workspace to set e-mail
// addresses, which is why it is off unless the operator turns it on.

// Refreshing the e-mail index: after a miss at most once a minute; a hit
// older than ten minutes is looked up again (an address changed in Slack
// stops mapping within ten minutes).
const (
	emailMissRefresh = time.Minute
	emailMaxAge      = 10 * time.Minute
)

// emailIndex maps Slack users to identities by e-mail, cached.
type emailIndex struct {
	mu     sync.Mutex
	byUser map[approvers.SlackUser]string
	// found is every identity each Slack user was found for in the last
	// refresh, those it maps none of (more than one) included.
	found     map[approvers.SlackUser][]string
	refreshed time.Time
}

// slackIdentity is the identity a Slack user decides as: the one whose
// slack field names them, or, with the e-mail lookup on, the one whose
// email Slack gives them.
func (g *Gateway) slackIdentity(ctx context.Context, team, user string) (approvers.Identity, bool) {
	if id, ok := g.cfg.Directory.SlackIdentity(team, user); ok {
		return id, true
	}
	if !g.cfg.Slack.EmailLookup || g.cfg.Slack.BotToken == "" {
		return approvers.Identity{}, false
	}
	ix := &g.emails
	ix.mu.Lock()
	defer ix.mu.Unlock()
	key := approvers.SlackUser{Team: team, User: user}
	name, hit := ix.byUser[key]
	age := time.Since(ix.refreshed)
	if (hit && age > emailMaxAge) || (!hit && age > emailMissRefresh) {
		ix.refresh(ctx, g)
		name, hit = ix.byUser[key]
	}
	if !hit {
		return approvers.Identity{}, false
	}
	return g.cfg.Directory.Identity(name)
}

// refresh looks up every identity's address; an address Slack does not
// know, a deleted user or a bot maps nobody. A failed lookup keeps what
// was found for that identity, a user found for it and another as well. A Slack user found for two identities maps
// neither: which one it decides as would otherwise depend on the order
// of the lookups.
func (ix *emailIndex) refresh(ctx context.Context, g *Gateway) {
	old := ix.found
	found := map[approvers.SlackUser][]string{}
	api := g.slackAPI()
	for name, email := range g.cfg.Directory.SlackEmails() {
		u, err := api.LookupByEmail(ctx, email)
		var ae *slack.APIError
		notFound := errors.As(err, &ae) && ae.Code == "users_not_found"
		switch {
		case err == nil && !u.Deleted && !u.IsBot && u.ID != "":
			key := approvers.SlackUser{Team: u.TeamID, User: u.ID}
			found[key] = append(found[key], name)
		case err != nil && !notFound:
			g.cfg.Logger.Warn("slack e-mail lookup failed", "identity", name, "error", err)
			for u, names := range old {
				if slices.Contains(names, name) {
					found[u] = append(found[u], name)
				}
			}
		}
	}
	next := make(map[approvers.SlackUser]string, len(found))
	for u, names := range found {
		if len(names) > 1 {
			slices.Sort(names)
			g.cfg.Logger.Warn("slack e-mail lookup: one Slack user has the addresses of several identities; it decides as none of them",
				"team", u.Team, "user", u.User, "identities", names)
			continue
		}
		next[u] = names[0]
	}
	ix.byUser, ix.found, ix.refreshed = next, found, time.Now()
}
