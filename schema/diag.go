// Package schema turns YAML documents into JSON values that remember where
// every value came from, validates them against embedded JSON Schemas
// (draft 2020-12), and reports problems as Diagnostics printed
// `file:line:col: path: message`, all at once and sorted.
//
// The workflow loader (engine) and the serve-config loader both build on
// LoadYAML + Validate; a Doc is immutable once loaded.
package schema

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Severity of a Diagnostic.
type Severity uint8

const (
	Error Severity = iota
	Warning
)

func (s Severity) String() string {
	if s == Warning {
		return "warning"
	}
	return "error"
}

// MarshalText makes Severity print as its name in JSON output.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Diagnostic is one load problem. Line and Col are 1-based (0 when the
// problem has no position, e.g. a missing file). Path is a dotted field path
// (`nodes[2].params.address`), "" for the document itself.
type Diagnostic struct {
	File     string   `json:"file"`
	Line     int      `json:"line"`
	Col      int      `json:"col"`
	Path     string   `json:"path"`
	Msg      string   `json:"message"`
	Severity Severity `json:"severity"`
	Rule     string   `json:"rule,omitempty"` // a Rule id (schema.Rules), "" for none
	Hint     string   `json:"hint,omitempty"` // how to fix this occurrence, when known
	// Source is the text of the source line (for the caret display); it is
	// filled by WithSource and not part of the JSON output.
	Source string `json:"-"`
}

// String is `file:line:col: path: message [rule]`; warnings say so after
// the path.
func (d Diagnostic) String() string {
	var b strings.Builder
	b.WriteString(d.File)
	if d.Line > 0 {
		b.WriteString(":" + strconv.Itoa(d.Line) + ":" + strconv.Itoa(d.Col))
	}
	b.WriteString(": ")
	if d.Path != "" {
		b.WriteString(d.Path + ": ")
	}
	if d.Severity == Warning {
		b.WriteString("warning: ")
	}
	b.WriteString(d.Msg)
	if d.Rule != "" {
		b.WriteString(" [" + d.Rule + "]")
	}
	return b.String()
}

// Pretty is String followed, when the source line is known, by the line
// and a caret under the column, and by the fix hint:
//
//	f.yaml:12:11: nodes[2].when: undeclared reference to "requets" [cel/undeclared-reference]
//	   12 |     when: requets.format == "chat"
//	      |           ^
//	      = fix: ...
//
// Every diagnostic with a rule gets a fix line: its own hint, else the
// rule's general fix from the rules table.
func (d Diagnostic) Pretty() string {
	var b strings.Builder
	b.WriteString(d.String())
	b.WriteByte('\n')
	fix := d.Fix()
	if d.Source != "" && d.Line > 0 {
		num := strconv.Itoa(d.Line)
		pad := strings.Repeat(" ", len(num))
		fmt.Fprintf(&b, " %s | %s\n", num, d.Source)
		fmt.Fprintf(&b, " %s | %s^\n", pad, caretPad(d.Source, d.Col))
		if fix != "" {
			fmt.Fprintf(&b, " %s = fix: %s\n", pad, fix)
		}
	} else if fix != "" {
		fmt.Fprintf(&b, "  = fix: %s\n", fix)
	}
	return b.String()
}

// Fix is how to fix the diagnostic: its own hint, else its rule's fix.
func (d Diagnostic) Fix() string {
	if d.Hint != "" {
		return d.Hint
	}
	if r, ok := LookupRule(d.Rule); ok {
		return r.Fix
	}
	return ""
}

// caretPad is the whitespace before column col (1-based, in runes) of
// line, keeping tabs so the caret lines up.
func caretPad(line string, col int) string {
	var b strings.Builder
	i := 1
	for _, r := range line {
		if i >= col {
			break
		}
		if r == '\t' {
			b.WriteByte('\t')
		} else {
			b.WriteByte(' ')
		}
		i++
	}
	for ; i < col; i++ {
		b.WriteByte(' ')
	}
	return b.String()
}

// WithSource fills Source for the diagnostics of file from its text.
func (ds Diagnostics) WithSource(file string, data []byte) Diagnostics {
	var lines []string
	for i := range ds {
		d := &ds[i]
		if d.File != file || d.Line < 1 || d.Source != "" {
			continue
		}
		if lines == nil {
			lines = strings.Split(string(data), "\n")
		}
		if d.Line <= len(lines) {
			d.Source = strings.TrimRight(lines[d.Line-1], "\r")
		}
	}
	return ds
}

// Pretty prints every diagnostic with its source line, caret and hint.
func (ds Diagnostics) Pretty() string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString(d.Pretty())
	}
	return b.String()
}

// HasWarnings reports whether any diagnostic is a warning.
func (ds Diagnostics) HasWarnings() bool {
	for _, d := range ds {
		if d.Severity == Warning {
			return true
		}
	}
	return false
}

// Diagnostics is a list of problems; the zero value means "all good".
type Diagnostics []Diagnostic

// HasErrors reports whether any diagnostic is an error (warnings do not fail a load).
func (ds Diagnostics) HasErrors() bool {
	for _, d := range ds {
		if d.Severity == Error {
			return true
		}
	}
	return false
}

// Sort orders by file, line, column, then message, and drops exact
// duplicates, so the same input always prints the same text.
func (ds Diagnostics) Sort() Diagnostics {
	sort.SliceStable(ds, func(i, j int) bool {
		a, b := ds[i], ds[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Col != b.Col {
			return a.Col < b.Col
		}
		if a.Path != b.Path {
			return a.Path < b.Path
		}
		return a.Msg < b.Msg
	})
	out := ds[:0]
	for i, d := range ds {
		if i > 0 && d == ds[i-1] {
			continue
		}
		out = append(out, d)
	}
	return out
}

// String prints one diagnostic per line.
func (ds Diagnostics) String() string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteString(d.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Err returns ds as an error when it holds an error, else nil.
func (ds Diagnostics) Err() error {
	if !ds.HasErrors() {
		return nil
	}
	return DiagError(ds)
}

// DiagError is Diagnostics used as an error value.
type DiagError Diagnostics

func (e DiagError) Error() string { return strings.TrimRight(Diagnostics(e).String(), "\n") }

// JSON renders ds as a JSON array (for `celflow validate --format json`).
func (ds Diagnostics) JSON() []byte {
	if ds == nil {
		ds = Diagnostics{}
	}
	b, _ := json.MarshalIndent(ds, "", "  ")
	return b
}

// GitHub renders ds as GitHub Actions workflow commands
// (`::error file=F,line=L,col=C::msg`), one per line.
func (ds Diagnostics) GitHub() string {
	var b strings.Builder
	for _, d := range ds {
		msg := d.Msg
		if d.Path != "" {
			msg = d.Path + ": " + msg
		}
		title := ""
		if d.Rule != "" {
			title = ",title=" + ghEscapeProp(d.Rule)
		}
		if d.Hint != "" {
			msg += " (fix: " + d.Hint + ")"
		}
		fmt.Fprintf(&b, "::%s file=%s,line=%d,col=%d%s::%s\n", d.Severity, ghEscapeProp(d.File),
			max(d.Line, 1), max(d.Col, 1), title, ghEscapeData(msg))
	}
	return b.String()
}

func ghEscapeData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func ghEscapeProp(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

// Errorf appends an error diagnostic at a document pointer of doc.
func (ds *Diagnostics) Errorf(doc *Doc, ptr string, format string, args ...any) {
	*ds = append(*ds, doc.Diag(ptr, Error, fmt.Sprintf(format, args...)))
}

// Warnf appends a warning diagnostic at a document pointer of doc.
func (ds *Diagnostics) Warnf(doc *Doc, ptr string, format string, args ...any) {
	*ds = append(*ds, doc.Diag(ptr, Warning, fmt.Sprintf(format, args...)))
}
