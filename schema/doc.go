package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Doc is a YAML document converted to a JSON value (nil, bool, json.Number,
// string, []any, map[string]any) plus an index from JSON pointers to YAML
// positions. A Doc is read-only after LoadYAML and safe for concurrent use.
type Doc struct {
	File string
	Root any

	base  string // pointer prefix of this Doc inside the loaded file (Sub)
	index map[string]*loc
	lines []string // source lines, for mapping offsets inside scalars
}

// loc is where one value sits in the YAML source.
type loc struct {
	line, col       int // the value (for a mapping or sequence: its first token)
	keyLine, keyCol int // the key that names it (0 for array elements and the root)
	node            *yaml.Node
	keys            []string // mapping keys in source order
	isArray         bool
}

// LoadYAML parses data (named file in diagnostics) into a Doc. It rejects
// what it cannot map to JSON with positions: several documents, anchors,
// aliases and merge keys, duplicate or non-string keys, custom tags and
// non-finite numbers. The Doc is nil only when the YAML does not parse.
func LoadYAML(file string, data []byte) (*Doc, Diagnostics) {
	var ds Diagnostics
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Diagnostics{{File: file, Line: 1, Col: 1, Msg: "empty document", Rule: RuleYAMLSyntax}}
		}
		return nil, Diagnostics{yamlErr(file, data, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		ds = append(ds, Diagnostic{File: file, Line: extra.Line, Col: extra.Column, Msg: "only one YAML document per file is allowed", Rule: RuleYAMLDocuments})
	}
	d := &Doc{File: file, index: map[string]*loc{}, lines: strings.Split(string(data), "\n")}
	n := &root
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	d.Root = d.convert(n, "", &ds)
	return d, ds
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlErr positions a yaml.v3 syntax error. yaml.v3 reports a line only,
// and often the line where the enclosing block starts (its context), not the
// offending one: the first prefix of the document, in whole lines, that fails
// with the same message is the offending line, and the column is the token
// the message is about (the colon a mapping value is not allowed after, a
// tab), else the line's first non-blank character, never a blind column 1.
func yamlErr(file string, data []byte, err error) Diagnostic {
	l, text := yamlMsg(err)
	lines := strings.SplitAfter(string(data), "\n")
	// Binary search for the shortest prefix that fails (a prefix of a broken block document
	// keeps failing once it includes the break), kept only when it fails
	// with the same message.
	fails := func(k int) (bool, string) {
		var n yaml.Node
		e := yaml.Unmarshal([]byte(strings.Join(lines[:k], "")), &n)
		if e == nil {
			return false, ""
		}
		_, t := yamlMsg(e)
		return true, t
	}
	lo, hi := 0, len(lines) // the empty prefix parses, the whole document fails
	if bad, _ := fails(hi); bad {
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if bad, _ := fails(mid); bad {
				hi = mid
			} else {
				lo = mid
			}
		}
		if _, t := fails(hi); t == text {
			l = min(hi, len(lines))
		}
	}
	col := 1
	if l >= 1 && l <= len(lines) {
		col = yamlErrCol(strings.TrimRight(lines[l-1], "\r\n"), text)
	}
	return Diagnostic{File: file, Line: l, Col: col, Msg: "invalid YAML: " + text, Rule: RuleYAMLSyntax}
}

// yamlMsg splits a yaml.v3 error into its line (1 when it names none) and text.
func yamlMsg(err error) (int, string) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		l, _ := strconv.Atoi(m[1])
		return l, m[2]
	}
	return 1, strings.TrimPrefix(msg, "yaml: ")
}

// yamlErrCol is the 1-based column (in runes) a yaml.v3 message is about on
// line.
func yamlErrCol(line, msg string) int {
	runeCol := func(byteOff int) int { return len([]rune(line[:byteOff])) + 1 }
	first := len(line) - len(strings.TrimLeft(line, " \t"))
	switch {
	case strings.Contains(msg, "mapping values are not allowed"):
		// The last ": " (or a trailing ":") outside quotes: the one the
		// line cannot take.
		last := -1
		var q byte
		for i := 0; i < len(line); i++ {
			c := line[i]
			switch {
			case q != 0:
				if c == q {
					q = 0
				}
			case c == '"' || c == '\'':
				q = c
			case c == '#' && (i == 0 || line[i-1] == ' '):
				i = len(line)
			case c == ':' && (i+1 == len(line) || line[i+1] == ' ' || line[i+1] == '\t'):
				last = i
			}
		}
		if last >= 0 {
			return runeCol(last)
		}
	case strings.Contains(msg, "node content"), strings.Contains(msg, "end of stream"),
		strings.Contains(msg, "expected ',' or"):
		// An unclosed bracket or quote: the last one the line opens.
		open := -1
		var stack []int
		var q byte
		for i := 0; i < len(line); i++ {
			c := line[i]
			switch {
			case q != 0:
				if c == q {
					q, open = 0, -1
				}
			case c == '"' || c == '\'':
				q, open = c, i
			case c == '[' || c == '{':
				stack = append(stack, i)
			case (c == ']' || c == '}') && len(stack) > 0:
				stack = stack[:len(stack)-1]
			}
		}
		if q == 0 && len(stack) > 0 {
			open = stack[len(stack)-1]
		}
		if open >= 0 {
			return runeCol(open)
		}
	case strings.Contains(msg, "tab character"), strings.Contains(msg, "found character that cannot start any token"):
		if i := strings.IndexByte(line, '\t'); i >= 0 && i <= first {
			return runeCol(i)
		}
	}
	return runeCol(first)
}

func (d *Doc) convert(n *yaml.Node, ptr string, ds *Diagnostics) any {
	l := d.index[ptr]
	if l == nil {
		l = &loc{}
		d.index[ptr] = l
	}
	l.line, l.col, l.node = n.Line, n.Column, n
	if n.Anchor != "" {
		*ds = append(*ds, d.Diag(ptr, Error, "YAML anchors are not supported (&"+n.Anchor+")").R(RuleYAMLAnchor))
	}
	switch n.Kind {
	case yaml.AliasNode:
		*ds = append(*ds, d.Diag(ptr, Error, "YAML aliases are not supported (*"+n.Value+")").R(RuleYAMLAnchor))
		return nil
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				what, rule := "a non-string key", RuleYAMLKey
				if k.Tag == "!!merge" {
					what, rule = "merge keys (<<)", RuleYAMLAnchor
				}
				*ds = append(*ds, Diagnostic{File: d.File, Line: k.Line, Col: k.Column, Path: d.path(ptr), Msg: what + " is not supported", Rule: rule})
				continue
			}
			cp := ptr + "/" + escapePtr(k.Value)
			if _, dup := m[k.Value]; dup {
				*ds = append(*ds, Diagnostic{File: d.File, Line: k.Line, Col: k.Column, Path: d.path(cp),
					Msg: fmt.Sprintf("duplicate key %q (first at line %d)", k.Value, d.index[cp].keyLine), Rule: RuleYAMLDupKey})
				continue
			}
			d.index[cp] = &loc{keyLine: k.Line, keyCol: k.Column}
			l.keys = append(l.keys, k.Value)
			m[k.Value] = d.convert(v, cp, ds)
		}
		return m
	case yaml.SequenceNode:
		l.isArray = true
		a := make([]any, len(n.Content))
		for i, c := range n.Content {
			a[i] = d.convert(c, ptr+"/"+strconv.Itoa(i), ds)
		}
		return a
	case yaml.ScalarNode:
		if strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
			// An unquoted value starting with ! (CEL's negation: !has(x),
			// !request.stream) is a YAML tag. Keep the text as written, so
			// that nothing else cascades from a null, and say to quote it.
			text := n.Tag
			if n.Value != "" {
				text += " " + n.Value
			}
			*ds = append(*ds, Diagnostic{File: d.File, Line: n.Line, Col: n.Column, Path: d.path(ptr),
				Msg:  fmt.Sprintf("YAML reads %s as a tag, not as text: quote the value to keep the !", n.Tag),
				Rule: RuleYAMLTag, Hint: "quote it: " + strconv.Quote(text)})
			return text
		}
		v, err := scalar(n)
		if err != nil {
			*ds = append(*ds, d.Diag(ptr, Error, err.Error()).R(RuleYAMLScalar))
		}
		return v
	}
	*ds = append(*ds, d.Diag(ptr, Error, "unsupported YAML node").R(RuleYAMLScalar))
	return nil
}

// scalar resolves a YAML 1.2 scalar to a JSON value. Integral numbers are
// spelled as integers (5.0 → 5) so that node types decoding params into Go
// ints accept them; out-of-int64 values keep a float spelling (1e+19) and are
// rejected by integer schemas.
func scalar(n *yaml.Node) (any, error) {
	switch n.Tag {
	case "!!str", "!!timestamp":
		return n.Value, nil
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, fmt.Errorf("invalid boolean %q", n.Value)
		}
		return b, nil
	case "!!int":
		var i int64
		if err := n.Decode(&i); err == nil {
			return json.Number(strconv.FormatInt(i, 10)), nil
		}
		var u uint64
		if err := n.Decode(&u); err == nil {
			return json.Number(strconv.FormatUint(u, 10)), nil
		}
		return json.Number(strings.TrimPrefix(strings.ReplaceAll(n.Value, "_", ""), "+")), nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, fmt.Errorf("invalid number %q", n.Value)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%s is not a finite number", n.Value)
		}
		if f == math.Trunc(f) && math.Abs(f) < 9.2e18 {
			return json.Number(strconv.FormatInt(int64(f), 10)), nil
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
	}
	return nil, fmt.Errorf("unsupported YAML tag %s", n.Tag)
}

func escapePtr(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func unescapePtr(s string) string {
	if !strings.Contains(s, "~") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

// Ptr joins pointer segments: Ptr("/nodes", 2, "when") = "/nodes/2/when".
func Ptr(base string, segs ...any) string {
	var b strings.Builder
	b.WriteString(base)
	for _, s := range segs {
		b.WriteByte('/')
		switch v := s.(type) {
		case int:
			b.WriteString(strconv.Itoa(v))
		case string:
			b.WriteString(escapePtr(v))
		default:
			b.WriteString(escapePtr(fmt.Sprint(v)))
		}
	}
	return b.String()
}

// Sub returns the part of d at ptr as a Doc of its own (the serve config's
// inline workflow). Positions and paths stay those of the whole file.
func (d *Doc) Sub(ptr string) (*Doc, bool) {
	v, ok := d.Value(ptr)
	if !ok {
		return nil, false
	}
	return &Doc{File: d.File, Root: v, base: d.base + ptr, index: d.index, lines: d.lines}, true
}

// Value returns the JSON value at ptr.
func (d *Doc) Value(ptr string) (any, bool) {
	v := d.Root
	if ptr == "" {
		return v, true
	}
	for _, seg := range strings.Split(ptr[1:], "/") {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[unescapePtr(seg)]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// JSON returns the value at ptr encoded as JSON (object keys sorted), nil
// when absent.
func (d *Doc) JSON(ptr string) []byte {
	v, ok := d.Value(ptr)
	if !ok {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// Keys lists an object's keys in source order.
func (d *Doc) Keys(ptr string) []string {
	if l := d.index[d.base+ptr]; l != nil {
		return l.keys
	}
	return nil
}

// Has reports whether a value exists at ptr.
func (d *Doc) Has(ptr string) bool { _, ok := d.index[d.base+ptr]; return ok }

// Tag is the resolved YAML tag of the scalar at ptr ("!!int", "!!float", ...).
func (d *Doc) Tag(ptr string) string {
	if l := d.index[d.base+ptr]; l != nil && l.node != nil {
		return l.node.Tag
	}
	return ""
}

// Pos is the 1-based line:col of the value at ptr, or of its nearest
// existing ancestor when ptr does not exist (a missing property).
func (d *Doc) Pos(ptr string) (line, col int) {
	l := d.nearest(d.base + ptr)
	if l == nil {
		return 0, 0
	}
	if l.node == nil {
		return l.keyLine, l.keyCol
	}
	return l.line, l.col
}

// KeyPos is the position of the key naming the value at ptr (for "unknown
// field" errors), or the value's position for array elements and the root.
func (d *Doc) KeyPos(ptr string) (line, col int) {
	if l := d.index[d.base+ptr]; l != nil && l.keyLine > 0 {
		return l.keyLine, l.keyCol
	}
	return d.Pos(ptr)
}

func (d *Doc) nearest(ptr string) *loc {
	for {
		if l := d.index[ptr]; l != nil {
			return l
		}
		i := strings.LastIndexByte(ptr, '/')
		if i < 0 {
			return nil
		}
		ptr = ptr[:i]
	}
}

// Diag builds a diagnostic at the value at ptr.
func (d *Doc) Diag(ptr string, sev Severity, msg string) Diagnostic {
	line, col := d.Pos(ptr)
	return Diagnostic{File: d.File, Line: line, Col: col, Path: d.path(ptr), Msg: msg, Severity: sev}
}

// DiagKey builds a diagnostic at the key naming the value at ptr.
func (d *Doc) DiagKey(ptr string, sev Severity, msg string) Diagnostic {
	line, col := d.KeyPos(ptr)
	return Diagnostic{File: d.File, Line: line, Col: col, Path: d.path(ptr), Msg: msg, Severity: sev}
}

// Path renders a pointer (relative to d) as the dotted path shown in
// diagnostics: /nodes/2/params/address → nodes[2].params.address.
func (d *Doc) Path(ptr string) string { return d.path(ptr) }

func (d *Doc) path(ptr string) string {
	full := d.base + ptr
	if full == "" {
		return ""
	}
	var b strings.Builder
	cur := ""
	for _, seg := range strings.Split(full[1:], "/") {
		parent := d.index[cur]
		cur += "/" + seg
		key := unescapePtr(seg)
		switch {
		case parent != nil && parent.isArray:
			b.WriteString("[" + key + "]")
		case isIdent(key):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(key)
		default:
			b.WriteString("[" + strconv.Quote(key) + "]")
		}
	}
	return b.String()
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9') {
			continue
		}
		return false
	}
	return true
}

// AttachSource fills Source for the diagnostics of d's file from the
// document's text (for a Sub document, the whole file's).
func (d *Doc) AttachSource(ds Diagnostics) Diagnostics {
	for i := range ds {
		if ds[i].File == d.File && ds[i].Source == "" {
			ds[i].Source = d.lineAt(ds[i].Line)
		}
	}
	return ds
}
