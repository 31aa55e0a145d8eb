package schema

import "sort"

// Rule is one load-time check with a stable id. Ids never change meaning
// and are never reused: CI configurations, SARIF baselines and suppression
// lists refer to them. docs/workflow-reference.md lists every rule (a test
// checks the list against this table).
type Rule struct {
	ID      string // area/kebab-name
	Summary string // what the check rejects, one line
	Fix     string // how to fix it, one line
}

// Rule ids of the document-level checks in this package; the engine and the
// serve-config loader declare theirs with the same table.
const (
	RuleInput         = "input/unreadable"
	RuleYAMLSyntax    = "yaml/syntax"
	RuleYAMLDocuments = "yaml/multiple-documents"
	RuleYAMLAnchor    = "yaml/anchor"
	RuleYAMLDupKey    = "yaml/duplicate-key"
	RuleYAMLKey       = "yaml/non-string-key"
	RuleYAMLScalar    = "yaml/scalar"
	RuleYAMLTag       = "yaml/tag"
	RuleUnknownField  = "schema/unknown-field"
	RuleMissingField  = "schema/missing-field"
	RuleWrongType     = "schema/wrong-type"
	RuleDuration      = "schema/duration"
	RuleEnum          = "schema/enum"
	RuleRange         = "schema/range"
	RuleSchema        = "schema/invalid"
	RuleInternal      = "internal/error"
	// Serve-config checks beyond the schema (validate --config, serve).
	RuleUnknownVariable = "config/unknown-variable"
	RuleUpstream        = "config/upstream"
	RuleAdmission       = "config/admission"
	RuleTLS             = "config/tls"
	RuleAsync           = "config/async"
)

var rules = map[string]Rule{}

// DefineRules adds rules to the table (at init). A rule id defined twice
// panics: ids are unique.
func DefineRules(rs ...Rule) {
	for _, r := range rs {
		if _, dup := rules[r.ID]; dup {
			panic("schema: rule " + r.ID + " defined twice")
		}
		rules[r.ID] = r
	}
}

// LookupRule returns a rule by id.
func LookupRule(id string) (Rule, bool) { r, ok := rules[id]; return r, ok }

// Rules lists every defined rule, sorted by id.
func Rules() []Rule {
	out := make([]Rule, 0, len(rules))
	for _, r := range rules {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func init() {
	DefineRules(
		Rule{RuleInput, "the file or directory cannot be read (validate exits 2)", "check the path and its permissions"},
		Rule{RuleYAMLSyntax, "the file is not valid YAML, or is empty", "fix the YAML at the line shown (indentation, an unclosed bracket or quote)"},
		Rule{RuleYAMLDocuments, "more than one YAML document (---) in one file", "keep one workflow per file"},
		Rule{RuleYAMLAnchor, "YAML anchors, aliases and merge keys (&x, *x, <<)", "write the value out in full"},
		Rule{RuleYAMLDupKey, "the same key twice in one mapping", "remove one of the two keys"},
		Rule{RuleYAMLKey, "a mapping key that is not a string (1:, [a]:)", "quote the key"},
		Rule{RuleYAMLTag, "an unquoted value starting with ! (CEL's negation, !has(x)), which YAML reads as a tag", "quote the value: when: \"!has(request.headers.x)\""},
		Rule{RuleYAMLScalar, "a value YAML cannot map to JSON (.nan, .inf, an explicit !!tag it cannot resolve)", "write a finite number or a plain string"},
		Rule{RuleUnknownField, "a key the schema does not define", "remove the key or fix its spelling (celflow schema shows the fields)"},
		Rule{RuleMissingField, "a required key is absent", "add the key"},
		Rule{RuleWrongType, "a value of the wrong JSON type (\"5\" for an integer, 4.5 for an integer, \"true\" for a boolean)", "write the value in the type the field expects"},
		Rule{RuleDuration, "a duration that is not a Go duration (30, \"30\")", "write a Go duration with a unit: 500ms, 30s, 1m30s"},
		Rule{RuleEnum, "a value outside the allowed set", "use one of the values listed in the message"},
		Rule{RuleRange, "a number or list length out of range", "use a value within the bounds in the message"},
		Rule{RuleSchema, "any other schema violation", "compare the value with celflow schema"},
		Rule{RuleInternal, "an internal error while loading (a bug)", "report it with the file that triggers it"},
		Rule{RuleUnknownVariable, "a CELFLOW_* variable that names no serve-config key (an error under validate --config and serve --check, a warning at serve start)", "fix the name (see the did-you-mean hint) or unset the variable"},
		Rule{RuleUpstream, "an upstream section the upstream client refuses (mode, URLs, duplicate endpoints, pool names)", "follow the message; docs/configuration.md lists the upstream keys"},
		Rule{RuleAdmission, "an admission section serve cannot apply: a priority expression that does not compile to an int over request.id/format/path/headers, or a queue or priority without a bound", "follow the message; set admission.max_in_flight or a route bound for a queue or a priority"},
		Rule{RuleTLS, "server.tls or upstream.tls settings that cannot work together, or a certificate, key or CA file that does not load", "fix the paths (relative to the config file) or the settings named in the message"},
		Rule{RuleAsync, "an async section serve cannot build from (a redis_url that is not a redis:// or rediss:// URL)", "write redis_url as redis://host:port/db"},
	)
}

// R returns d with its rule id set.
func (d Diagnostic) R(rule string) Diagnostic { d.Rule = rule; return d }

// H returns d with a fix hint.
func (d Diagnostic) H(hint string) Diagnostic { d.Hint = hint; return d }
