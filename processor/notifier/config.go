package notifier

import (
	"fmt"
	"net/mail"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/interlockhq/interlock/subjects"
)

// Config is a notifier's configuration: where notifications go (sinks) and
// which suspensions go where (routes).
type Config struct {
	// GatewayURL, when set, adds links to the HTTP gateway to every message.
	GatewayURL string
	// Command is how messages spell the CLI; default "interlock".
	Command string
	// NATSURL is shown in the CLI commands messages carry, when set.
	NATSURL string
	// Attempts per delivery before it is dead-lettered; default 5.
	Attempts int
	// Backoff between attempts, indexed by attempt; the last repeats.
	// Default 1s, 5s, 30s, 2m.
	Backoff []time.Duration
	// AckWait is how long after a notifier dies mid-delivery the
	// notification is delivered again (by another notifier, or this one
	// restarted), set on the sink's consumer when it is created or
	// provisioned; zero keeps the consumer's (30s for a new one). A live delivery is kept alive however long
	// its sink's timeout, so it is never sent twice for being slow.
	AckWait time.Duration
	// Remember is how long deliveries are remembered to drop repeats;
	// default 30 days.
	Remember time.Duration
	Sinks    []SinkConfig
	Routes   []RouteConfig
}

// SinkConfig is one destination. Type selects which fields apply.
type SinkConfig struct {
	Name string
	// Type is webhook, slack, email, log or nats.
	Type string
	// URL of a webhook or a Slack incoming webhook.
	URL string
	// Cards (cards: gateway) makes a Slack sink's messages cards with
	// Approve / Deny buttons, followed in their thread, instead of text
	// through an incoming webhook: the gateway, which alone holds the bot
	// token, draws and posts them into the channel it maps the sink to
	// (interlock gateway --slack-channel SINK=CHANNEL); the notifier asks
	// it on the chat card service and holds no Slack token.
	Cards bool
	// Buttons, set to false on a card sink, leaves the buttons and forms
	// off its cards (the per-sink switch for chat decisions): the card
	// carries the question and the inbox link.
	Buttons *bool
	// Secret signs webhook bodies (HMAC-SHA256); SecretEnv names an
	// environment variable holding it.
	Secret  string
	Headers map[string]string
	Timeout time.Duration
	// SMTP, From and To configure e-mail.
	SMTP SMTPConfig
	From string
	To   []string
	// Subject is the NATS subject a nats sink publishes on; with JetStream
	// set, a stream must capture it and the publish waits for its ack.
	Subject   string
	JetStream bool
	// Output of a log sink: stdout (default) or stderr.
	Output string
	// Personal, on a sink that reaches one person only (an e-mail to them
	// alone, a direct message), is that person's identity: its messages
	// carry one-click decision links, which the notifier asks the gateway
	// for (the gateway decides whom the sink reaches, from its own
	// identities file, and whether they may decide). Empty (the default)
	// is a shared channel, which gets only the inbox link, behind a login.
	Personal string
	line     int
}

// SMTPConfig says how to reach a mail server.
type SMTPConfig struct {
	Host string
	Port int
	// StartTLS upgrades the connection before authenticating; TLS dials
	// TLS from the start (port 465).
	StartTLS bool
	TLS      bool
	// InsecureSkipVerify accepts any server certificate (tests only);
	// CAFile trusts a private CA.
	InsecureSkipVerify bool
	CAFile             string
	Username           string
	Password           string
}

// RouteConfig sends the suspensions its Match expression accepts to Sinks.
type RouteConfig struct {
	Name string
	// Match is an expr-lang expression over the suspension (see Env).
	Match     string
	Sinks     []string
	Templates Templates
	line      int
}

// Templates override a route's message text; empty fields keep the
// defaults. Subject and Text are text/template, HTML is html/template.
type Templates struct {
	Subject string
	Text    string
	HTML    string
}

// Sink types.
var sinkFields = map[string][]string{
	"webhook": {"url", "secret", "secret_env", "headers", "timeout", "personal"},
	"slack":   {"url", "cards", "buttons", "timeout", "personal", "channel", "token_env", "api_url"},
	"email":   {"smtp", "from", "to", "timeout", "personal"},
	"log":     {"output", "personal"},
	"nats":    {"subject", "jetstream", "timeout", "personal"},
}

// LoadConfig reads and checks a YAML configuration file. Every mistake is
// reported with the file and line, wrapping ErrConfig.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &ConfigError{File: path, Msg: err.Error()}
	}
	return ParseConfig(path, data)
}

// ParseConfig checks YAML configuration data; name is used in errors.
func ParseConfig(name string, data []byte) (*Config, error) {
	p := parser{file: name}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, &ConfigError{File: name, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if len(root.Content) == 0 {
		return nil, &ConfigError{File: name, Msg: "empty configuration: it needs sinks and routes"}
	}
	cfg, err := p.config(root.Content[0])
	if err != nil {
		return nil, err
	}
	if err := p.validate(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

type parser struct{ file string }

func (p parser) errf(n *yaml.Node, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &ConfigError{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// fields checks that n is a mapping with only allowed keys and returns the
// value nodes by key.
func (p parser) fields(n *yaml.Node, what string, allowed ...string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, "%s must be a mapping", what)
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !slices.Contains(allowed, k.Value) {
			sorted := slices.Clone(allowed)
			sort.Strings(sorted)
			return nil, p.errf(k, "%s: unknown field %q (known: %s)", what, k.Value, strings.Join(sorted, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, p.errf(k, "%s: %q appears twice", what, k.Value)
		}
		out[k.Value] = v
	}
	return out, nil
}

func (p parser) decode(n *yaml.Node, what string, v any) error {
	if n == nil {
		return nil
	}
	if err := n.Decode(v); err != nil {
		msg := err.Error()
		if te, ok := err.(*yaml.TypeError); ok {
			msg = strings.Join(te.Errors, "; ")
		}
		return p.errf(n, "%s: %s", what, strings.TrimPrefix(msg, "yaml: "))
	}
	return nil
}

func (p parser) config(n *yaml.Node) (*Config, error) {
	f, err := p.fields(n, "configuration", "gateway_url", "command", "nats_url", "retry", "remember", "links", "sinks", "routes")
	if err != nil {
		return nil, err
	}
	cfg := &Config{}
	for _, d := range []struct {
		key string
		v   any
	}{{"gateway_url", &cfg.GatewayURL}, {"command", &cfg.Command}, {"nats_url", &cfg.NATSURL}, {"remember", &cfg.Remember}} {
		if err := p.decode(f[d.key], d.key, d.v); err != nil {
			return nil, err
		}
	}
	if r := f["retry"]; r != nil {
		rf, err := p.fields(r, "retry", "attempts", "backoff", "ack_wait")
		if err != nil {
			return nil, err
		}
		if err := p.decode(rf["ack_wait"], "retry.ack_wait", &cfg.AckWait); err != nil {
			return nil, err
		}
		if rf["ack_wait"] != nil && cfg.AckWait < time.Second {
			return nil, p.errf(rf["ack_wait"], "retry.ack_wait must be at least 1s")
		}
		if err := p.decode(rf["attempts"], "retry.attempts", &cfg.Attempts); err != nil {
			return nil, err
		}
		if err := p.decode(rf["backoff"], "retry.backoff", &cfg.Backoff); err != nil {
			return nil, err
		}
		if rf["attempts"] != nil && cfg.Attempts < 1 {
			return nil, p.errf(rf["attempts"], "retry.attempts must be at least 1")
		}
	}
	if l := f["links"]; l != nil {
		// The notifier held the link secret once, and whoever held its
		// configuration could sign a link deciding as anyone.
		return nil, p.errf(l, "links: the notifier signs no links any more; the gateway mints them, for the sinks its "+
			"identities file lists (identities: <name>: {links: [sink]}), and holds the secret itself "+
			"(interlock gateway --link-secret-env). Remove links here and the secret from the notifier's environment; "+
			"see docs/notifiers.md")
	}
	s := f["sinks"]
	if s == nil {
		return nil, p.errf(n, "sinks: at least one sink is required")
	}
	if s.Kind != yaml.MappingNode {
		return nil, p.errf(s, "sinks must be a mapping of sink names to sinks")
	}
	for i := 0; i+1 < len(s.Content); i += 2 {
		sc, err := p.sink(s.Content[i], s.Content[i+1])
		if err != nil {
			return nil, err
		}
		cfg.Sinks = append(cfg.Sinks, sc)
	}
	r := f["routes"]
	if r == nil {
		return nil, p.errf(n, "routes: at least one route is required")
	}
	if r.Kind != yaml.SequenceNode {
		return nil, p.errf(r, "routes must be a list")
	}
	for i, rn := range r.Content {
		rc, err := p.route(i, rn)
		if err != nil {
			return nil, err
		}
		cfg.Routes = append(cfg.Routes, rc)
	}
	return cfg, nil
}

func (p parser) sink(key, n *yaml.Node) (SinkConfig, error) {
	sc := SinkConfig{Name: key.Value, line: key.Line}
	what := fmt.Sprintf("sink %q", sc.Name)
	if err := subjects.ValidateToken("sink name", sc.Name); err != nil {
		return sc, p.errf(key, "%s: %v", what, err)
	}
	typeNode := findKey(n, "type")
	if typeNode == nil {
		return sc, p.errf(key, "%s: type is required (webhook, slack, email, log or nats)", what)
	}
	sc.Type = typeNode.Value
	allowed, ok := sinkFields[sc.Type]
	if !ok {
		return sc, p.errf(typeNode, "%s: type %q is not webhook, slack, email, log or nats", what, sc.Type)
	}
	f, err := p.fields(n, what, append([]string{"type"}, allowed...)...)
	if err != nil {
		return sc, err
	}
	var secretEnv, tokenEnv, cards, channel, apiURL string
	for _, d := range []struct {
		key string
		v   any
	}{{"url", &sc.URL}, {"secret", &sc.Secret}, {"secret_env", &secretEnv}, {"headers", &sc.Headers},
		{"timeout", &sc.Timeout}, {"from", &sc.From}, {"to", &sc.To}, {"subject", &sc.Subject}, {"output", &sc.Output}, {"jetstream", &sc.JetStream},
		{"personal", &sc.Personal}, {"channel", &channel}, {"token_env", &tokenEnv}, {"api_url", &apiURL}, {"cards", &cards},
		{"buttons", &sc.Buttons}} {
		if err := p.decode(f[d.key], what+": "+d.key, d.v); err != nil {
			return sc, err
		}
	}
	if secretEnv != "" {
		if sc.Secret = os.Getenv(secretEnv); sc.Secret == "" {
			return sc, p.errf(f["secret_env"], "%s: environment variable %s is empty or unset", what, secretEnv)
		}
	}
	for _, k := range []string{"channel", "token_env", "api_url"} {
		if f[k] != nil {
			// The notifier once held the bot token and drew the cards,
			// which let its holder put any value under any button.
			return sc, p.errf(f[k], "%s: %s: the gateway posts Slack cards now, and only it holds the bot token: "+
				"set cards: gateway here, and give the gateway the token and this sink's channel "+
				"(interlock gateway --slack-bot-token-env VAR --slack-channel %s=CHANNEL)", what, k, sc.Name)
		}
	}
	switch cards {
	case "":
	case "gateway":
		sc.Cards = true
	default:
		return sc, p.errf(f["cards"], "%s: cards %q: the only value is gateway (the gateway posts the cards)", what, cards)
	}
	if err := p.personal(sc, f["personal"], what); err != nil {
		return sc, err
	}
	if m := f["smtp"]; m != nil {
		if sc.SMTP, err = p.smtp(m, what); err != nil {
			return sc, err
		}
	}
	switch sc.Type {
	case "slack":
		if sc.Cards || sc.URL == "" {
			return sc, p.slackCards(sc, key, f, what)
		}
		if sc.Buttons != nil {
			return sc, p.errf(key, "%s: buttons need cards (cards: gateway), not an incoming webhook (url)", what)
		}
		fallthrough
	case "webhook":
		if sc.URL == "" {
			return sc, p.errf(key, "%s: url is required", what)
		}
		if !strings.HasPrefix(sc.URL, "http://") && !strings.HasPrefix(sc.URL, "https://") {
			return sc, p.errf(f["url"], "%s: url %q is not http:// or https://", what, sc.URL)
		}
	case "email":
		if sc.SMTP.Host == "" {
			return sc, p.errf(key, "%s: smtp.host is required", what)
		}
		if sc.From == "" || len(sc.To) == 0 {
			return sc, p.errf(key, "%s: from and to are required", what)
		}
		if _, err := mail.ParseAddress(sc.From); err != nil {
			return sc, p.errf(f["from"], "%s: from %q is not an e-mail address: %v", what, sc.From, err)
		}
		for _, to := range sc.To {
			if _, err := mail.ParseAddress(to); err != nil {
				return sc, p.errf(f["to"], "%s: to %q is not an e-mail address: %v", what, to, err)
			}
		}
	case "nats":
		if sc.Subject == "" || strings.ContainsAny(sc.Subject, "*> \t") {
			return sc, p.errf(key, "%s: subject is required and takes no wildcards or spaces", what)
		}
	case "log":
		if sc.Output != "" && sc.Output != "stdout" && sc.Output != "stderr" {
			return sc, p.errf(f["output"], "%s: output %q is not stdout or stderr", what, sc.Output)
		}
	}
	return sc, nil
}

// slackCards checks a Slack card sink: the gateway posts it, so no
// incoming webhook and no personal links.
func (p parser) slackCards(sc SinkConfig, key *yaml.Node, f map[string]*yaml.Node, what string) error {
	switch {
	case sc.URL != "" && sc.Cards:
		return p.errf(f["url"], "%s: url (an incoming webhook) and cards: gateway exclude each other", what)
	case !sc.Cards:
		return p.errf(key, "%s: url (an incoming webhook) or cards: gateway (cards with buttons, posted by the gateway) is required", what)
	case sc.Personal != "":
		return p.errf(f["personal"], "%s: a card sink carries buttons, not personal links; map Slack users to "+
			"identities in the gateway's identities file (slack: {team, user}) instead", what)
	}
	return nil
}

// personal checks a sink's personal field: an identity, on a sink that can
// reach one person only.
func (p parser) personal(sc SinkConfig, n *yaml.Node, what string) error {
	if sc.Personal == "" {
		return nil
	}
	if err := subjects.ValidateToken("personal", sc.Personal); err != nil {
		return p.errf(n, "%s: %v", what, err)
	}
	switch {
	case sc.Type == "log" || sc.Type == "nats":
		return p.errf(n, "%s: a %s sink is a shared channel; it cannot carry %s's personal links", what, sc.Type, sc.Personal)
	case sc.Type == "email" && len(sc.To) != 1:
		return p.errf(n, "%s: personal links go to %s alone: to must list one address, not %d", what, sc.Personal, len(sc.To))
	}
	return nil
}

func (p parser) smtp(n *yaml.Node, what string) (SMTPConfig, error) {
	var c SMTPConfig
	f, err := p.fields(n, what+": smtp", "host", "port", "starttls", "tls", "insecure_skip_verify", "ca_file",
		"username", "password", "password_env")
	if err != nil {
		return c, err
	}
	var passwordEnv string
	for _, d := range []struct {
		key string
		v   any
	}{{"host", &c.Host}, {"port", &c.Port}, {"starttls", &c.StartTLS}, {"tls", &c.TLS},
		{"insecure_skip_verify", &c.InsecureSkipVerify}, {"ca_file", &c.CAFile}, {"username", &c.Username},
		{"password", &c.Password}, {"password_env", &passwordEnv}} {
		if err := p.decode(f[d.key], what+": smtp."+d.key, d.v); err != nil {
			return c, err
		}
	}
	if passwordEnv != "" {
		c.Password = os.Getenv(passwordEnv)
	}
	if c.StartTLS && c.TLS {
		return c, p.errf(n, "%s: smtp.starttls and smtp.tls exclude each other", what)
	}
	if c.Port == 0 {
		c.Port = 587
		if c.TLS {
			c.Port = 465
		}
	}
	return c, nil
}

func (p parser) route(i int, n *yaml.Node) (RouteConfig, error) {
	rc := RouteConfig{line: n.Line}
	what := fmt.Sprintf("routes[%d]", i)
	f, err := p.fields(n, what, "name", "match", "sinks", "templates")
	if err != nil {
		return rc, err
	}
	if err := p.decode(f["name"], what+".name", &rc.Name); err != nil {
		return rc, err
	}
	if rc.Name == "" {
		rc.Name = fmt.Sprintf("route-%d", i)
	}
	if err := p.decode(f["match"], what+".match", &rc.Match); err != nil {
		return rc, err
	}
	if rc.Match == "" {
		return rc, p.errf(n, "%s: match is required (use \"true\" to match everything)", what)
	}
	if err := p.decode(f["sinks"], what+".sinks", &rc.Sinks); err != nil {
		return rc, err
	}
	if len(rc.Sinks) == 0 {
		return rc, p.errf(n, "%s: sinks is required", what)
	}
	if t := f["templates"]; t != nil {
		tf, err := p.fields(t, what+".templates", "subject", "text", "html")
		if err != nil {
			return rc, err
		}
		for _, d := range []struct {
			key string
			v   *string
		}{{"subject", &rc.Templates.Subject}, {"text", &rc.Templates.Text}, {"html", &rc.Templates.HTML}} {
			if err := p.decode(tf[d.key], what+".templates."+d.key, d.v); err != nil {
				return rc, err
			}
		}
	}
	return rc, nil
}

// validate checks what spans sections: route sinks exist, expressions and
// templates compile.
func (p parser) validate(cfg *Config) error {
	names := map[string]bool{}
	for _, s := range cfg.Sinks {
		names[s.Name] = true
		if s.Personal != "" && cfg.GatewayURL == "" {
			return &ConfigError{File: p.file, Line: s.line, Msg: fmt.Sprintf("sink %q: personal needs gateway_url: "+
				"%s's links point at the gateway, which mints them", s.Name, s.Personal)}
		}
	}
	for i, r := range cfg.Routes {
		for _, s := range r.Sinks {
			if !names[s] {
				return &ConfigError{File: p.file, Line: r.line, Msg: fmt.Sprintf("routes[%d] (%s): sink %q is not defined", i, r.Name, s)}
			}
		}
		if _, err := compileMatch(r.Match); err != nil {
			return &ConfigError{File: p.file, Line: r.line, Msg: fmt.Sprintf("routes[%d] (%s): match: %v", i, r.Name, err)}
		}
		if _, err := parseTemplates(r.Templates); err != nil {
			return &ConfigError{File: p.file, Line: r.line, Msg: fmt.Sprintf("routes[%d] (%s): %v", i, r.Name, err)}
		}
	}
	return nil
}

func findKey(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
