// Package approvers is the directory of approver identities: who a token
// belongs to and which groups an identity is in. The gateway authenticates
// with it; the coordinator authorizes approver groups with it.
package approvers

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/mail"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/interlockhq/interlock/processor/authz"
	"github.com/interlockhq/interlock/subjects"
)

// ErrConfig is matched by every error loading a directory.
var ErrConfig = errors.New("approvers file")

// Identity is an authenticated approver: the principal the one
// authorization rule (package authz) decides about.
type Identity = authz.Principal

// RoleAuditor is the role that may read every run, interrupt and audit
// entry.
const RoleAuditor = "auditor"

// Directory maps tokens to identities and identities to groups and roles.
type Directory struct {
	byToken  map[[32]byte]string
	groups   map[string][]string
	auditors map[string]bool
	agents   map[string][]string
	// linkSinks maps a notifier sink to the one identity it reaches: the
	// gateway mints that identity's one-click links for it, and for no
	// other sink.
	linkSinks map[string]string
	// slack maps a Slack user (team and user id) to the one identity whose
	// decisions their clicks make.
	slack map[SlackUser]string
	// emails are the addresses of the identities without a slack field,
	// for the gateway's opt-in Slack e-mail lookup.
	emails map[string]string
}

// SlackUser is a Slack user: the workspace (team id, T...) and the user id
// in it (U... or W...). User ids are unique only within a workspace, so an
// identity names both.
type SlackUser struct {
	Team string `yaml:"team"`
	User string `yaml:"user"`
}

type file struct {
	Identities map[string]struct {
		Groups []string `yaml:"groups"`
		// Roles grant more than deciding; the one role is "auditor".
		Roles []string `yaml:"roles"`
		// Tokens are API tokens, stored as "sha256:<hex>" of the token.
		Tokens []string `yaml:"tokens"`
		// Agents are the agents the identity may start over AG-UI.
		Agents []string `yaml:"agents"`
		// Links are the notifier sinks that reach this identity alone (an
		// e-mail to them, a direct message): the gateway mints their
		// one-click decision links for these sinks only.
		Links []string `yaml:"links"`
		// Slack is the Slack user whose clicks decide as this identity.
		Slack *SlackUser `yaml:"slack"`
		// Email is the identity's e-mail address: where the gateway's
		// Slack e-mail lookup is turned on, the Slack user with this
		// address decides as this identity (unless slack names one).
		Email string `yaml:"email"`
	} `yaml:"identities"`
}

// Load reads a directory:
//
//	identities:
//	  ada:
//	    groups: [finance]
//	    tokens: ["sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"]
//	  erin:
//	    roles: [auditor]
//	    links: [erin-mail]
//	    slack: {team: T0123ABCD, user: U0456EFGH}
//
// Identity names are subject tokens ([A-Za-z0-9_-]); tokens are stored only
// as SHA-256 digests (`interlock token` prints a new token and its digest).
func Load(path string) (*Directory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return Parse(path, data)
}

// Parse is Load on data; name is used in errors.
func Parse(name string, data []byte) (*Directory, error) {
	var f file
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrConfig, name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	d := &Directory{byToken: map[[32]byte]string{}, groups: map[string][]string{}, auditors: map[string]bool{},
		agents: map[string][]string{}, linkSinks: map[string]string{}, slack: map[SlackUser]string{},
		emails: map[string]string{}}
	addresses := map[string]string{} // lower-cased e-mail address: identity
	for id, e := range f.Identities {
		if err := subjects.ValidateToken("identity", id); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrConfig, name, err)
		}
		d.groups[id] = e.Groups
		for _, r := range e.Roles {
			if r != RoleAuditor {
				return nil, fmt.Errorf("%w: %s: identity %s: role %q is not %q", ErrConfig, name, id, r, RoleAuditor)
			}
			d.auditors[id] = true
		}
		for _, a := range e.Agents {
			if a != "*" {
				if err := subjects.ValidateToken("agent", a); err != nil {
					return nil, fmt.Errorf("%w: %s: identity %s: %w", ErrConfig, name, id, err)
				}
			}
		}
		d.agents[id] = e.Agents
		for _, sink := range e.Links {
			if err := subjects.ValidateToken("sink", sink); err != nil {
				return nil, fmt.Errorf("%w: %s: identity %s: links: %w", ErrConfig, name, id, err)
			}
			if other, dup := d.linkSinks[sink]; dup {
				return nil, fmt.Errorf("%w: %s: identities %s and %s both list links sink %s: a sink that carries "+
					"one-click links reaches one person", ErrConfig, name, other, id, sink)
			}
			d.linkSinks[sink] = id
		}
		if su := e.Slack; su != nil {
			if !slackID(su.Team, 'T', 'E') || !slackID(su.User, 'U', 'W') {
				return nil, fmt.Errorf("%w: %s: identity %s: slack: team %q and user %q must be Slack ids "+
					"(team T..., user U... or W..., upper-case letters and digits)", ErrConfig, name, id, su.Team, su.User)
			}
			if other, dup := d.slack[*su]; dup {
				return nil, fmt.Errorf("%w: %s: identities %s and %s both map Slack user %s/%s: a click decides as one "+
					"identity", ErrConfig, name, other, id, su.Team, su.User)
			}
			d.slack[*su] = id
		}
		if e.Email != "" {
			a, err := mail.ParseAddress(e.Email)
			if err != nil || a.Address != e.Email {
				return nil, fmt.Errorf("%w: %s: identity %s: email %q is not a bare e-mail address", ErrConfig, name, id, e.Email)
			}
			lower := strings.ToLower(e.Email)
			if other, dup := addresses[lower]; dup {
				return nil, fmt.Errorf("%w: %s: identities %s and %s both have e-mail address %s (in any case): an address "+
					"reaches one person, and the Slack user found by it decides as one identity", ErrConfig, name, other, id, e.Email)
			}
			addresses[lower] = id
			if e.Slack == nil {
				d.emails[id] = lower
			}
		}
		for _, t := range e.Tokens {
			digest, ok := strings.CutPrefix(t, "sha256:")
			raw, err := hex.DecodeString(digest)
			if !ok || err != nil || len(raw) != 32 {
				return nil, fmt.Errorf("%w: %s: identity %s: token %q is not sha256:<64 hex digits>", ErrConfig, name, id, t)
			}
			var key [32]byte
			copy(key[:], raw)
			if other, dup := d.byToken[key]; dup {
				return nil, fmt.Errorf("%w: %s: identities %s and %s share a token", ErrConfig, name, other, id)
			}
			d.byToken[key] = id
		}
	}
	return d, nil
}

// Digest is the form a token is stored in: "sha256:" and its hex SHA-256.
func Digest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Authenticate returns the identity a token belongs to.
func (d *Directory) Authenticate(token string) (Identity, bool) {
	if d == nil || token == "" {
		return Identity{}, false
	}
	return d.AuthenticateDigest(sha256.Sum256([]byte(token)))
}

// AuthenticateDigest is Authenticate on a token's SHA-256 digest: an inbox
// session keeps the digest, never the token, and holds only while the
// directory still lists it.
func (d *Directory) AuthenticateDigest(sum [32]byte) (Identity, bool) {
	if d == nil {
		return Identity{}, false
	}
	name, ok := d.byToken[sum]
	if !ok {
		return Identity{}, false
	}
	return d.Identity(name)
}

// Identity returns a known identity by name, with its groups and roles.
func (d *Directory) Identity(name string) (Identity, bool) {
	if d == nil {
		return Identity{}, false
	}
	groups, ok := d.groups[name]
	if !ok {
		return Identity{}, false
	}
	return Identity{Name: name, Groups: groups, Auditor: d.auditors[name],
		Agents: d.agents[name]}, true
}

// Groups returns the groups of an identity.
func (d *Directory) Groups(identity string) []string {
	if d == nil {
		return nil
	}
	return d.groups[identity]
}

// Members returns the identities in group, sorted: the eligible voters a
// group adds to an interrupt with a policy.
func (d *Directory) Members(group string) []string {
	if d == nil {
		return nil
	}
	var out []string
	for name, groups := range d.groups {
		if slices.Contains(groups, group) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// LinkRecipient returns the identity whose one-click links may go through
// the notifier's sink: the one identity that lists it under links. A sink
// no identity lists gets no links.
func (d *Directory) LinkRecipient(sink string) (Identity, bool) {
	if d == nil {
		return Identity{}, false
	}
	name, ok := d.linkSinks[sink]
	if !ok {
		return Identity{}, false
	}
	return d.Identity(name)
}

// slackID reports whether s looks like a Slack id starting with one of
// first: an upper-case letter, then upper-case letters and digits.
func slackID(s string, first ...byte) bool {
	if len(s) < 2 || len(s) > 32 || !strings.ContainsRune(string(first), rune(s[0])) {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// SlackIdentity returns the identity a Slack user decides as: the one whose
// slack field names that team and user. Any other Slack user is nobody.
func (d *Directory) SlackIdentity(team, user string) (Identity, bool) {
	if d == nil {
		return Identity{}, false
	}
	name, ok := d.slack[SlackUser{Team: team, User: user}]
	if !ok {
		return Identity{}, false
	}
	return d.Identity(name)
}

// SlackEmails returns, by identity, the e-mail addresses of the identities
// that name no Slack user: those the gateway may map by looking the address
// up in Slack, where the operator turned that on.
func (d *Directory) SlackEmails() map[string]string {
	if d == nil {
		return nil
	}
	return maps.Clone(d.emails)
}
