package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/interlockhq/interlock/jetstream"
	"github.com/interlockhq/interlock/subjects"
)

func newAuth(g *globals) *cobra.Command {
	var agents, approvers []string
	var format string
	cmd := &cobra.Command{
		Use:   "auth --agent NAME[=USER]... [--approver NAME]...",
		Short: "Print the NATS users and permissions of agents (and approvers), for auth.conf or the Helm values",
		Long: `Print one NATS user per agent, confined to that agent's own subjects and
reads (its starts, work consumer, outcomes, suspensions and AG-UI events,
and its own keys in the OpenAI Agents adapter's bucket of run states),
and one per approver, deciding only as themselves: the entries of the users
list of deploy/nats/auth.conf (--format conf) or of the Helm values'
config.merge.accounts.INTERLOCK.users (--format helm). An agent's user is
agent_NAME unless given as NAME=USER. Each password comes from the
environment variable INTERLOCK_<USER>_PASSWORD ('-' read as '_'), as in the
shipped files. --json prints the same as data.

The users of the shipped deploy/nats/auth.conf are
  interlock auth --agent refunds=agent --agent billing --approver ada --approver bob`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ns, err := subjects.New(g.prefix)
			if err != nil {
				return usage(fmt.Errorf("--prefix: %w", err))
			}
			users, err := authUsers(ns, agents, approvers)
			if err != nil {
				return usage(err)
			}
			if g.json {
				return printJSON(cmd.OutOrStdout(), users)
			}
			switch format {
			case "conf":
				return writeAuthConf(cmd.OutOrStdout(), users)
			case "helm":
				return writeAuthHelm(cmd.OutOrStdout(), users)
			}
			return usage(fmt.Errorf("--format %q: want conf or helm", format))
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&agents, "agent", nil, "an agent, NAME or NAME=USER (repeat for more)")
	f.StringArrayVar(&approvers, "approver", nil, "an approver deciding over NATS as themselves (repeat for more)")
	f.StringVar(&format, "format", "conf", "conf (deploy/nats/auth.conf) or helm (deploy/kubernetes/nats-values.yaml)")
	return cmd
}

// authUser is one generated NATS user.
type authUser struct {
	User        string   `json:"user"`
	Agent       string   `json:"agent,omitempty"`
	Approver    string   `json:"approver,omitempty"`
	PasswordEnv string   `json:"passwordEnv"`
	Publish     []string `json:"publish"`
	Subscribe   []string `json:"subscribe"`
}

// authUsers are the users of agents (NAME or NAME=USER) and approvers under
// ns, in that order. Names must be subject tokens, users distinct.
func authUsers(ns subjects.Namespace, agents, approvers []string) ([]authUser, error) {
	if len(agents)+len(approvers) == 0 {
		return nil, fmt.Errorf("name at least one --agent or --approver")
	}
	var out []authUser
	seen := map[string]bool{}
	add := func(u authUser) error {
		if seen[u.User] {
			return fmt.Errorf("user %q named twice", u.User)
		}
		seen[u.User] = true
		out = append(out, u)
		return nil
	}
	for _, a := range agents {
		name, user, named := strings.Cut(a, "=")
		if !named {
			user = "agent_" + name
		}
		if err := subjects.ValidateToken("agent", name); err != nil {
			return nil, fmt.Errorf("--agent %q: %w", a, err)
		}
		if err := subjects.ValidateToken("user", user); err != nil {
			return nil, fmt.Errorf("--agent %q: %w", a, err)
		}
		if err := add(agentUser(ns, name, user)); err != nil {
			return nil, err
		}
	}
	for _, name := range approvers {
		if err := subjects.ValidateToken("approver", name); err != nil {
			return nil, fmt.Errorf("--approver %q: %w", name, err)
		}
		if err := add(approverUser(ns, name)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// streamName is the server-side name of s under ns's prefix (as
// jetstream.Client.StreamName).
func streamName(ns subjects.Namespace, s jetstream.Stream) string {
	return strings.ToUpper(strings.ReplaceAll(ns.Prefix(), ".", "_")) + "_" + string(s)
}

// agentUser is the NATS user of agent: it starts runs of that agent only,
// takes work from that agent's durable consumer only, reports and emits on
// subjects carrying that agent's token only, and reads (with direct gets
// naming the subject, the only reads NATS permissions can confine to
// subjects) the runs stream's and AG-UI stream's messages of that agent
// only. Message ids it cannot confine: subjects.OutcomeMsgID and EmitMsgID
// hold a key only a holder of the work item can compute. It also puts,
// deletes and reads (direct gets naming the key) the keys under its own
// name in the OpenAI Agents adapter's bucket (jetstream.OpenAIAgentsBucket),
// never another agent's, and has no stream info on it (which lists keys).
func agentUser(ns subjects.Namespace, agent, user string) authUser {
	p := ns.Prefix()
	work, runs, agui := streamName(ns, jetstream.StreamWork), streamName(ns, jetstream.StreamRuns), streamName(ns, jetstream.StreamAGUI)
	durable := subjects.WorkerDurable(agent)
	states := strings.ReplaceAll(p, ".", "_") + "_" + jetstream.OpenAIAgentsBucket // as jetstream.Client.BucketName
	return authUser{User: user, Agent: agent, PasswordEnv: passwordEnv(user),
		Publish: []string{
			p + ".start." + agent,
			p + ".suspended." + agent + ".*", p + ".completed." + agent + ".*", p + ".failed." + agent + ".*",
			p + ".agui." + agent + ".*", p + ".ask." + agent + ".*", p + ".dlq." + durable,
			"$JS.API.CONSUMER.INFO." + work + "." + durable, "$JS.API.CONSUMER.MSG.NEXT." + work + "." + durable,
			"$JS.ACK." + work + "." + durable + ".>",
			"$JS.API.DIRECT.GET." + runs + "." + p + ".*." + agent + ".*",
			"$JS.API.DIRECT.GET." + agui + "." + p + ".agui." + agent + ".*",
			"$KV." + states + "." + agent + ".>", "$JS.API.DIRECT.GET.KV_" + states + ".$KV." + states + "." + agent + ".>",
		},
		Subscribe: []string{subjects.InboxPrefix(user) + ".>"},
	}
}

// approverUser is the NATS user of approver: decides only as themselves,
// reads the audit trail (the verdict of a resent decision).
func approverUser(ns subjects.Namespace, approver string) authUser {
	events := streamName(ns, jetstream.StreamEvents)
	return authUser{User: approver, Approver: approver, PasswordEnv: passwordEnv(approver),
		Publish: []string{ns.Prefix() + ".resume.*." + approver, "$JS.API.STREAM.INFO." + events, "$JS.API.STREAM.MSG.GET." + events,
			"$JS.API.DIRECT.GET." + events, "$JS.API.DIRECT.GET." + events + ".>"},
		Subscribe: []string{subjects.InboxPrefix(approver) + ".>"},
	}
}

// passwordEnv is the environment variable user's password is read from.
func passwordEnv(user string) string {
	return "INTERLOCK_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_")) + "_PASSWORD"
}

// quoted is list as a JSON-style list of strings, as auth.conf writes them.
func quoted(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = `"` + s + `"`
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// wrapped is list as quoted writes it, broken into lines of at most about
// 110 characters, each continuation line starting with indent.
func wrapped(list []string, indent string) string {
	var b strings.Builder
	b.WriteString("[")
	width := 0
	for i, s := range list {
		item := `"` + s + `"`
		if i > 0 {
			b.WriteString(",")
			if width+len(item) > 110 {
				b.WriteString("\n" + indent)
				width = 0
			} else {
				b.WriteString(" ")
			}
		}
		b.WriteString(item)
		width += len(item) + 2
	}
	return b.String() + "]"
}

// writeAuthConf writes users as entries of an auth.conf users list.
func writeAuthConf(w io.Writer, users []authUser) error {
	var b strings.Builder
	for _, u := range users {
		if u.Agent != "" {
			fmt.Fprintf(&b, "      # Agent %s: its own subjects, consumer and reads only.\n", u.Agent)
		} else {
			fmt.Fprintf(&b, "      # Approver %s: decides only as %s.\n", u.Approver, u.Approver)
		}
		fmt.Fprintf(&b, "      {user: %s, password: $%s, permissions: {\n", u.User, u.PasswordEnv)
		fmt.Fprintf(&b, "        publish: %s\n", wrapped(u.Publish, "                  "))
		fmt.Fprintf(&b, "        subscribe: %s\n", quoted(u.Subscribe))
		b.WriteString("      }}\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeAuthHelm writes users as entries of the Helm values' users list,
// then the container environment entries their passwords come from.
func writeAuthHelm(w io.Writer, users []authUser) error {
	var b strings.Builder
	b.WriteString("# config.merge.accounts.INTERLOCK.users:\n")
	for _, u := range users {
		fmt.Fprintf(&b, "          - user: %s\n", u.User)
		fmt.Fprintf(&b, "            password: \"<< $%s >>\"\n", u.PasswordEnv)
		b.WriteString("            permissions:\n              publish:\n")
		fmt.Fprintf(&b, "                allow: %s\n", quoted(u.Publish))
		b.WriteString("              subscribe:\n")
		fmt.Fprintf(&b, "                allow: %s\n", quoted(u.Subscribe))
	}
	b.WriteString("# container.env (the Secret interlock-nats holds one key per user):\n")
	for _, u := range users {
		fmt.Fprintf(&b, "    %s: {valueFrom: {secretKeyRef: {name: interlock-nats, key: %s}}}\n", u.PasswordEnv, u.User)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
