package schema

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// diag turns one validation problem into a readable diagnostic. inst is
// relative to the validated value, which sits at base in the doc.
func (p problem) diag(doc *Doc, base string) Diagnostic {
	d := p.diag1(doc, base)
	if d.Rule == "" {
		d.Rule = RuleSchema
	}
	return d
}

func (p problem) diag1(doc *Doc, base string) Diagnostic {
	ptr := base + p.inst
	v, _ := doc.Value(ptr)
	switch p.keyword {
	case "additionalProperties", "unevaluatedProperties":
		// One diagnostic per unknown key, at the key.
		var ds []string
		for _, k := range doc.Keys(ptr) {
			if strings.Contains(p.msg, quote(k)) {
				ds = append(ds, k)
			}
		}
		if len(ds) > 0 {
			// The first unknown key carries the message; extra ones are rare
			// and get their own problem through expandUnknown.
			return doc.DiagKey(Ptr(ptr, ds[0]), Error, unknownMsg(ds[0], doc.Keys(ptr))).R(RuleUnknownField)
		}
	case "required":
		names := quotedNames(p.msg)
		if len(names) == 1 {
			return doc.Diag(ptr, Error, fmt.Sprintf("missing required field %q", names[0])).R(RuleMissingField)
		}
		return doc.Diag(ptr, Error, "missing required fields "+strings.Join(quoteAll(names), ", ")).R(RuleMissingField)
	case "type":
		if p.format == "duration" || p.format == "go-duration" {
			return durationDiag(doc, ptr, v)
		}
		if p.msg != "" && strings.HasSuffix(p.msg, "(out of the 64-bit range)") {
			return doc.Diag(ptr, Error, p.msg).R(RuleRange)
		}
		if strings.HasPrefix(p.msg, "expected ") && strings.Contains(p.msg, ", but got") {
			want := p.msg[len("expected "):strings.Index(p.msg, ", but got")]
			return doc.Diag(ptr, Error, "expected "+want+", got "+describe(v)).R(RuleWrongType)
		}
	case "format":
		if strings.HasSuffix(p.msg, "'duration'") || strings.HasSuffix(p.msg, "'go-duration'") {
			return durationDiag(doc, ptr, v)
		}
	case "enum", "const":
		return doc.Diag(ptr, Error, strings.TrimPrefix(p.msg, "value ")+", got "+describe(v)).R(RuleEnum)
	case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum":
		return doc.Diag(ptr, Error, strings.Replace(p.msg, " but found ", ", got ", 1)).R(RuleRange)
	case "minItems":
		var want, got int
		if _, err := fmt.Sscanf(p.msg, "minimum %d items required, but found %d items", &want, &got); err == nil {
			return doc.Diag(ptr, Error, fmt.Sprintf("needs at least %d item(s), got %d", want, got)).R(RuleRange)
		}
	case "":
		if p.msg == "not allowed" {
			return doc.DiagKey(ptr, Error, "field not allowed here").R(RuleUnknownField)
		}
	}
	return doc.Diag(ptr, Error, p.msg)
}

func durationDiag(doc *Doc, ptr string, v any) Diagnostic {
	return doc.Diag(ptr, Error, fmt.Sprintf("invalid duration %s (want a non-negative Go duration such as \"30s\" or \"1m30s\")", describe(v))).R(RuleDuration)
}

// expandUnknown splits an additionalProperties problem naming several keys
// into one problem per key, so each gets its own position.
func expandUnknown(ps []problem, doc *Doc, base string) []problem {
	var out []problem
	for _, p := range ps {
		if p.keyword != "additionalProperties" && p.keyword != "unevaluatedProperties" {
			out = append(out, p)
			continue
		}
		n := 0
		for _, k := range doc.Keys(base + p.inst) {
			if strings.Contains(p.msg, quote(k)) {
				out = append(out, problem{inst: p.inst, keyword: p.keyword, msg: quote(k)})
				n++
			}
		}
		if n == 0 {
			out = append(out, p)
		}
	}
	return out
}

func unknownMsg(k string, _ []string) string { return fmt.Sprintf("unknown field %q", k) }

// describe renders a JSON value for "got ..." in messages.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		b, _ := json.Marshal(x)
		return string(b)
	case json.Number:
		return string(x)
	case bool:
		if x {
			return "true"
		}
		return "false"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprint(v)
}

// quote mirrors jsonschema's quoting of property names in messages.
func quote(s string) string {
	s = fmt.Sprintf("%q", s)
	s = strings.ReplaceAll(s, `\"`, `"`)
	s = strings.ReplaceAll(s, `'`, `\'`)
	return "'" + s[1:len(s)-1] + "'"
}

// quotedNames extracts 'a', 'b' names from a jsonschema message.
func quotedNames(msg string) []string {
	var out []string
	for {
		i := strings.IndexByte(msg, '\'')
		if i < 0 {
			break
		}
		j := i + 1
		for j < len(msg) && (msg[j] != '\'' || msg[j-1] == '\\') {
			j++
		}
		if j >= len(msg) {
			break
		}
		out = append(out, strings.ReplaceAll(msg[i+1:j], `\'`, `'`))
		msg = msg[j+1:]
	}
	sort.Strings(out)
	return out
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
