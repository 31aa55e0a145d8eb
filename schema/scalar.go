package schema

import (
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// ScalarPos maps a position inside the string scalar at ptr (line 1-based,
// col 0-based in runes, as CEL reports them) to the file's 1-based line:col.
// Plain and quoted scalars map column by column (quotes and escapes
// accounted for); literal blocks (|) map line by line; folded blocks (>) and
// multi-line plain scalars map through their folding. When the source
// cannot be followed the scalar's own position is returned.
func (d *Doc) ScalarPos(ptr string, line, col int) (int, int) {
	l := d.index[d.base+ptr]
	if l == nil || l.node == nil || l.node.Kind != yaml.ScalarNode {
		return d.Pos(ptr)
	}
	n := l.node
	if line < 1 {
		line = 1
	}
	switch {
	case n.Style&yaml.LiteralStyle != 0:
		first, indent := d.blockStart(n.Line)
		return first + line - 1, indent + col + 1
	case n.Style&yaml.FoldedStyle != 0:
		first, indent := d.blockStart(n.Line)
		return d.walkSegments(first, indent, runeOffset(n.Value, line, col), false)
	}
	off := runeOffset(n.Value, line, col)
	src := d.lineAt(n.Line)
	if src == "" {
		return n.Line, n.Column
	}
	switch {
	case n.Style&yaml.DoubleQuotedStyle != 0:
		if c, ok := quotedCol(src, n.Column, off, '"'); ok {
			return n.Line, c
		}
	case n.Style&yaml.SingleQuotedStyle != 0:
		if c, ok := quotedCol(src, n.Column, off, '\''); ok {
			return n.Line, c
		}
	default:
		rest := runeSlice(src, n.Column-1)
		if off <= utf8.RuneCountInString(strings.TrimRight(rest, " \t")) || !strings.Contains(n.Value, " ") {
			return n.Line, n.Column + off
		}
		return d.walkSegments(n.Line, n.Column-1, off, true)
	}
	return n.Line, n.Column
}

func (d *Doc) lineAt(line int) string {
	if line < 1 || line > len(d.lines) {
		return ""
	}
	return strings.TrimRight(d.lines[line-1], "\r")
}

// blockStart finds a block scalar's first content line and its indentation.
func (d *Doc) blockStart(indicator int) (line, indent int) {
	for l := indicator + 1; l <= len(d.lines); l++ {
		s := d.lineAt(l)
		if strings.TrimSpace(s) == "" {
			continue
		}
		return l, len(s) - len(strings.TrimLeft(s, " "))
	}
	return indicator + 1, 0
}

// walkSegments follows folding: each source line contributes its trimmed
// text plus one separator to the value.
func (d *Doc) walkSegments(first, startCol, off int, plain bool) (int, int) {
	for l := first; l <= len(d.lines); l++ {
		s := d.lineAt(l)
		col := startCol
		if l != first || !plain {
			col = len(s) - len(strings.TrimLeft(s, " \t"))
		}
		seg := strings.TrimRight(runeSlice(s, col), " \t")
		n := utf8.RuneCountInString(seg)
		if off <= n {
			return l, col + off + 1
		}
		off -= n + 1
	}
	return first, startCol + 1
}

// runeOffset turns CEL's line/col into a rune offset in the value.
func runeOffset(v string, line, col int) int {
	off := 0
	for i := 1; i < line; i++ {
		j := strings.IndexByte(v, '\n')
		if j < 0 {
			break
		}
		off += utf8.RuneCountInString(v[:j+1])
		v = v[j+1:]
	}
	return off + col
}

// quotedCol walks a one-line quoted scalar starting at 1-based column start
// (the quote) and returns the column of the value's rune off.
func quotedCol(src string, start, off int, q rune) (int, bool) {
	rs := []rune(src)
	i := start // index of the first rune after the quote (0-based)
	for k := 0; k < off; k++ {
		if i >= len(rs) {
			return 0, false
		}
		switch {
		case q == '\'' && rs[i] == '\'' && i+1 < len(rs) && rs[i+1] == '\'':
			i += 2
		case q == '"' && rs[i] == '\\' && i+1 < len(rs):
			switch rs[i+1] {
			case 'x':
				i += 4
			case 'u':
				i += 6
			case 'U':
				i += 10
			default:
				i += 2
			}
		case rs[i] == q:
			return 0, false // the scalar continues on the next line
		default:
			i++
		}
	}
	return i + 1, true
}

func runeSlice(s string, from int) string {
	if from <= 0 {
		return s
	}
	for i := range s {
		if from == 0 {
			return s[i:]
		}
		from--
	}
	return ""
}
