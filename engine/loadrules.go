package engine

import (
	"fmt"

	"github.com/celflow/celflow/schema"
)

// Rule ids of the workflow checks (schema.Rule; the yaml/ and schema/ ones
// live in package schema). docs/workflow-reference.md#rules lists them all.
const (
	RuleVarName          = "vars/invalid-name"
	RuleVarNull          = "vars/null"
	RuleNodeID           = "node/invalid-id"
	RuleDuplicateID      = "node/duplicate-id"
	RuleUnknownType      = "node/unknown-type"
	RuleParams           = "node/params"
	RuleForEachRequired  = "node/foreach-required"
	RuleForEachForbidden = "node/foreach-not-allowed"
	RuleCELSyntax        = "cel/syntax"
	RuleCELUndeclared    = "cel/undeclared-reference"
	RuleCELField         = "cel/undefined-field"
	RuleCELType          = "cel/type-mismatch"
	RuleCELResult        = "cel/result-type"
	RuleCELDyn           = "cel/dyn-result"
	RuleCELNotPreceding  = "cel/read-not-preceding"
	RuleCELWholeNodes    = "cel/read-whole-nodes"
	RuleCELRace          = "cel/read-races-writer"
	RuleCELOutput        = "cel/unknown-output"
	RuleCELOutcome       = "cel/outcome-word"
	RuleCELStatus        = "cel/http-status"
	RuleCELStatusNever   = "cel/status-never-produced"
	RuleCELHeaderLookup  = "cel/header-may-be-absent"
	RuleCELHeaderCase    = "cel/header-name-case"
	RuleCELCost          = "cel/cost-limit"
	RuleUnknownNeed      = "graph/unknown-need"
	RuleDuplicateNeed    = "graph/duplicate-need"
	RuleCycle            = "graph/cycle"
	RuleAfterTerminal    = "graph/after-terminal-responder"
	RuleResponderEdge    = "graph/responder-edge-needs-if"
	RuleUnreachable      = "graph/unreachable"
	RuleNoResponder      = "graph/no-responder"
	RuleUnanswered       = "graph/path-without-answer"
	RuleRacingResponders = "graph/racing-responders"
	RuleDataflow         = "dataflow/missing-input"
	RuleProviders        = "dataflow/unordered-providers"
	RuleWanted           = "dataflow/never-provided"
	RuleTestRoute        = "tests/route-not-served"
	RuleTestNode         = "tests/unknown-node"
	RuleTestFailed       = "tests/failed"
	RuleTargetPlacement  = "target/placement"
	RuleTargetOrder      = "target/rule-order"
	RuleTargetHeader     = "target/header"
	RuleTargetPool       = "target/unknown-pool"
	// RuleDecodeFallback is decode's fallback pool (nodes/decode): one
	// upstream.pools does not define, or the pool the node already uses.
	RuleDecodeFallback = "decode/fallback-pool"
)

func init() {
	schema.DefineRules(
		schema.Rule{ID: RuleVarNull, Summary: "a vars: key with no value (null), which every expression reading it would fail on", Fix: "give it a value: a number, a quoted string, a list [..] or a map {..}, or remove it"},
		schema.Rule{ID: RuleVarName, Summary: "a vars: key that is not a CEL identifier", Fix: "rename it with letters, digits and _ (not starting with a digit)"},
		schema.Rule{ID: RuleNodeID, Summary: "a node id that is not a CEL identifier or is a reserved word", Fix: "rename it with letters, digits and _ (try_decode, not try-decode)"},
		schema.Rule{ID: RuleDuplicateID, Summary: "two nodes with the same id", Fix: "give each node its own id"},
		schema.Rule{ID: RuleUnknownType, Summary: "a node type that is not registered", Fix: "use a type listed by celflow schema types"},
		schema.Rule{ID: RuleParams, Summary: "params the node type refuses (its Build), or a warning about them", Fix: "follow the message; celflow schema node TYPE shows the params"},
		schema.Rule{ID: RuleForEachRequired, Summary: "a fan-out node type (encode) without foreach", Fix: "add foreach: media (or a filter of it)"},
		schema.Rule{ID: RuleForEachForbidden, Summary: "foreach on a node type that does not fan out", Fix: "remove foreach"},
		schema.Rule{ID: RuleCELSyntax, Summary: "a CEL expression that does not parse", Fix: "fix the expression at the caret"},
		schema.Rule{ID: RuleCELUndeclared, Summary: "a name that is not a variable in scope", Fix: "use request, media, tokens, nodes, config (and outcome, response in edge conditions and retry predicates)"},
		schema.Rule{ID: RuleCELField, Summary: "a field the type does not have (`nodes.decod`, `config.shrt`, `request.modle`)", Fix: "use the field named in the did-you-mean hint"},
		schema.Rule{ID: RuleCELType, Summary: "operands of the wrong type (`response.status == \"412\"`)", Fix: "compare values of the same type"},
		schema.Rule{ID: RuleCELResult, Summary: "a guard, edge condition or retry predicate that is not bool, or a foreach that is not a list", Fix: "make the expression return the type its field needs"},
		schema.Rule{ID: RuleCELDyn, Summary: "an expression whose type is only known at run time (dyn) where bool or a list is required", Fix: "compare or convert the value (`x == \"...\"`, `bool(x)`) so its type is known at load"},
		schema.Rule{ID: RuleCELNotPreceding, Summary: "`nodes.X` read where X does not precede the reader on every path", Fix: "list X in needs, directly or through a predecessor"},
		schema.Rule{ID: RuleCELWholeNodes, Summary: "`nodes` read as a whole", Fix: "read `nodes.<id>`"},
		schema.Rule{ID: RuleCELRace, Summary: "an expression reads media or tokens while a node writing them may be running", Fix: "make one node need the other"},
		schema.Rule{ID: RuleCELOutput, Summary: "`nodes.X.outputs.Y` where X's type declares no output Y", Fix: "use an output the type declares (docs: Outputs)"},
		schema.Rule{ID: RuleCELOutcome, Summary: "an outcome status compared with a word that is not an outcome", Fix: "use succeeded, failed, skipped, omitted, timed_out or cancelled"},
		schema.Rule{ID: RuleCELStatus, Summary: "an HTTP status compared with a number outside 100-599", Fix: "use a real HTTP status (412, 503)"},
		schema.Rule{ID: RuleCELStatusNever, Summary: "warning: a response.status compared with a status (412) the node's type never produces", Fix: "compare with a status the node type can produce, or drop the edge"},
		schema.Rule{ID: RuleCELHeaderLookup, Summary: "`request.headers[\"x\"]` of a header the request may lack (the lookup would fail the request with 500)", Fix: "write `request.headers[?\"x\"].orValue(\"\")` or `\"x\" in request.headers && ...`"},
		schema.Rule{ID: RuleCELHeaderCase, Summary: "a header name with capitals (names are lowercased, so it never matches)", Fix: "write the header name in lowercase"},
		schema.Rule{ID: RuleCELCost, Summary: "an expression whose estimated cost exceeds the limit", Fix: "bound the data the expression iterates (filter fewer items, avoid nested macros)"},
		schema.Rule{ID: RuleUnknownNeed, Summary: "a need naming no node", Fix: "name an existing node id (see the did-you-mean hint)"},
		schema.Rule{ID: RuleDuplicateNeed, Summary: "the same node needed twice by one node", Fix: "keep one need and combine the two conditions with or"},
		schema.Rule{ID: RuleCycle, Summary: "nodes that need each other in a cycle", Fix: "remove one need of the cycle"},
		schema.Rule{ID: RuleAfterTerminal, Summary: "a node after a terminal responder (decode), which ends the run when it succeeds", Fix: "make the node need something before the responder"},
		schema.Rule{ID: RuleResponderEdge, Summary: "an unconditional edge from a responder that answers when it succeeds", Fix: "add if: (for example response.status == 412)"},
		schema.Rule{ID: RuleUnreachable, Summary: "a node no path from the request reaches", Fix: "fix the edge that can never fire, or remove the node"},
		schema.Rule{ID: RuleNoResponder, Summary: "no reachable node can answer the client", Fix: "add a decode node at the end of the path"},
		schema.Rule{ID: RuleUnanswered, Summary: "a way a run can end (on some route, for some outcome) where no node answers the client and nothing failed", Fix: "add a responder (decode) after the node the path ends at, or route that outcome elsewhere"},
		schema.Rule{ID: RuleRacingResponders, Summary: "warning: two responders can run at the same time; the first to answer wins", Fix: "order them (one needs the other, with an if:) or make their guards exclusive"},
		schema.Rule{ID: RuleDataflow, Summary: "a node needs data (tokens, media, ec, kv) that is not provided on every path into it", Fix: "add the provider (render, fetch, encode, prefill) before it on that path"},
		schema.Rule{ID: RuleWanted, Summary: "warning: data a node works without, but whose absence defeats it, can never precede it on a route (direct-mode conditional decode without render never predicts a hit; a guard or target condition reading tokens.count with no render before it reads 0; one that reads tokens.known or media never holds there)", Fix: "add the provider (render) before the node on that route, or follow the node's hint (conditional-decode: mode: worker)"},
		schema.Rule{ID: RuleProviders, Summary: "two nodes provide the same data and are not ordered", Fix: "make one need the other"},
		schema.Rule{ID: RuleTestRoute, Summary: "a tests: request on a route the workflow does not serve", Fix: "use a route listed in routes:"},
		schema.Rule{ID: RuleTestNode, Summary: "a tests: entry naming an unknown node", Fix: "name an existing node id"},
		schema.Rule{ID: RuleTargetPlacement, Summary: "target rules on a node that sends no worker leg, or a pool rule on a node whose endpoint is shared (the concurrent kv-sglang prefill)", Fix: "move the rules to the conditional-decode, encode, prefill or decode node whose legs they route, or route by headers or model"},
		schema.Rule{ID: RuleTargetOrder, Summary: "a target rule without if before other rules (they can never be chosen)", Fix: "move the rule without if last, or give it an if"},
		schema.Rule{ID: RuleTargetHeader, Summary: "a target rule header with capitals, or one celflow must set itself (framing, hop-by-hop, x-request-id, trace context, x-celflow-pool)", Fix: "write header names in lower case; set the pool with pool:"},
		schema.Rule{ID: RuleTargetPool, Summary: "a target rule's pool that upstream.pools does not define (checked when the serve config is known)", Fix: "add upstream.pools.<name> to the serve config, or fix the name (see the did-you-mean hint)"},
		schema.Rule{ID: RuleTestFailed, Summary: "a tests: entry whose request does not take the pinned path", Fix: "fix the workflow or the expectation, using celflow explain"},
		schema.Rule{ID: RuleDecodeFallback, Summary: "a decode fallback pool that upstream.pools does not define (checked when the serve config is known), or the decode role's own pool", Fix: "add upstream.pools.<name> to the serve config, fix the name (see the did-you-mean hint), or name another pool than decode's own"},
	)
}

// errf appends an error of rule at ptr.
func (c *compiler) errf(rule, ptr, format string, args ...any) *schema.Diagnostic {
	c.ds = append(c.ds, c.doc.Diag(ptr, schema.Error, fmt.Sprintf(format, args...)).R(rule))
	return &c.ds[len(c.ds)-1]
}

// warnf appends a warning of rule at ptr.
func (c *compiler) warnf(rule, ptr, format string, args ...any) *schema.Diagnostic {
	c.ds = append(c.ds, c.doc.Diag(ptr, schema.Warning, fmt.Sprintf(format, args...)).R(rule))
	return &c.ds[len(c.ds)-1]
}
