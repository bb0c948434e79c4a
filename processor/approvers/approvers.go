// Package approvers is the directory of approver identities: who a token
// belongs to and which groups an identity is in. The gateway authenticates
// with it; the coordinator authorizes approver groups with it.
package approvers

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/interlockhq/interlock/subjects"
)

// ErrConfig is matched by every error loading a directory.
var ErrConfig = errors.New("approvers file")

// Identity is an authenticated approver.
type Identity struct {
	Name   string
	Groups []string
	// Agents lists the agents the identity may start through the AG-UI
	// bridge; "*" is every agent.
	Agents []string
}

// MayStart reports whether the identity may start runs of agent.
func (id Identity) MayStart(agent string) bool {
	return slices.Contains(id.Agents, agent) || slices.Contains(id.Agents, "*")
}

// Directory maps tokens to identities and identities to groups.
type Directory struct {
	byToken map[[32]byte]string
	groups  map[string][]string
	agents  map[string][]string
}

type file struct {
	Identities map[string]struct {
		Groups []string `yaml:"groups"`
		// Tokens are API tokens, stored as "sha256:<hex>" of the token.
		Tokens []string `yaml:"tokens"`
		// Agents are the agents the identity may start over AG-UI.
		Agents []string `yaml:"agents"`
	} `yaml:"identities"`
}

// Load reads a directory:
//
//	identities:
//	  ada:
//	    groups: [finance]
//	    tokens: ["sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"]
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
	d := &Directory{byToken: map[[32]byte]string{}, groups: map[string][]string{}, agents: map[string][]string{}}
	for id, e := range f.Identities {
		if err := subjects.ValidateToken("identity", id); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrConfig, name, err)
		}
		d.groups[id] = e.Groups
		for _, a := range e.Agents {
			if a != "*" {
				if err := subjects.ValidateToken("agent", a); err != nil {
					return nil, fmt.Errorf("%w: %s: identity %s: %w", ErrConfig, name, id, err)
				}
			}
		}
		d.agents[id] = e.Agents
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
	name, ok := d.byToken[sha256.Sum256([]byte(token))]
	if !ok {
		return Identity{}, false
	}
	return Identity{Name: name, Groups: d.groups[name], Agents: d.agents[name]}, true
}

// Groups returns the groups of an identity.
func (d *Directory) Groups(identity string) []string {
	if d == nil {
		return nil
	}
	return d.groups[identity]
}
