package flowtest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/celflow/celflow/engine"
)

// sortLegs orders legs for the golden: kind rank, then body, then arrival
// (doc.go). Concurrent legs thus appear in an order that does not depend on
// scheduling.
func sortLegs(legs []*leg) []*leg {
	out := append([]*leg(nil), legs...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if ra, rb := kindRank(a.kind), kindRank(b.kind); ra != rb {
			return ra < rb
		}
		if c := bytes.Compare(a.body, b.body); c != 0 {
			return c < 0
		}
		return a.seq < b.seq
	})
	return out
}

// renderLegs is the raw (not yet normalised) text of legs.golden.
func renderLegs(c *flowCase, legs []*leg) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: every upstream call, sorted by kind, body, arrival (cmd/internal/server/flowtest/doc.go)\n",
		filepath.Base(c.dir))
	fmt.Fprintf(&b, "# ACCEPTANCE %s\n", joinInts(c.Acceptance))
	if len(legs) == 0 {
		b.WriteString("\n(no upstream call)\n")
	}
	for i, l := range legs {
		reply := strconv.Itoa(l.status)
		switch l.status {
		case 0:
			reply = "hangup"
		case -1:
			reply = "none (cancelled by celflow)"
		}
		fmt.Fprintf(&b, "\n=== %d %s · %s %s · %s · reply %s\n", i+1, l.kind, l.method, l.path, l.target, reply)
		writeHeaders(&b, l.header, nil)
		b.WriteString("\n")
		writeBody(&b, l.body)
	}
	return b.String()
}

// renderResponse is the raw text of response.golden.
func renderResponse(c *flowCase, r *result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: the client's reply, then each node's outcome\n", filepath.Base(c.dir))
	fmt.Fprintf(&b, "# ACCEPTANCE %s\n\n", joinInts(c.Acceptance))
	fmt.Fprintf(&b, "HTTP %d\n", r.resp.StatusCode)
	if len(r.resp.TransferEncoding) > 0 {
		fmt.Fprintf(&b, "(transfer-encoding: %s)\n", strings.Join(r.resp.TransferEncoding, ", "))
	}
	writeHeaders(&b, r.resp.Header, map[string]bool{"Date": true})
	b.WriteString("\n")
	writeBody(&b, r.body)
	if w := strings.TrimSpace(r.warn); w != "" {
		fmt.Fprintf(&b, "\n--- load warnings\n%s\n", w)
	}
	b.WriteString("\n--- run\n")
	if r.report == nil {
		b.WriteString("(no run: refused by the front)\n")
		return b.String()
	}
	unpinned := map[string]bool{}
	for _, n := range c.Unpinned {
		unpinned[n] = true
	}
	for _, o := range r.report.Outcomes {
		if unpinned[o.Node] {
			fmt.Fprintf(&b, "%s: (not pinned: timing-dependent)\n", o.Node)
			continue
		}
		b.WriteString(outcomeLine(o, ""))
		for _, it := range o.Items {
			b.WriteString(outcomeLine(it, "  "))
		}
	}
	if r.report.Err != nil {
		fmt.Fprintf(&b, "run error: %s %s at %s\n", r.report.Err.Code(), r.report.Err.Type(), r.report.Err.Where())
	}
	return b.String()
}

func outcomeLine(o engine.Outcome, indent string) string {
	var b strings.Builder
	name := o.Node
	if indent != "" {
		name = "item"
	}
	fmt.Fprintf(&b, "%s%s: %s", indent, name, o.Status)
	if o.Reason != "" {
		fmt.Fprintf(&b, " (%s)", o.Reason)
	}
	if o.HTTPStatus != 0 {
		fmt.Fprintf(&b, " http=%d", o.HTTPStatus)
	}
	if o.Attempt > 1 {
		fmt.Fprintf(&b, " attempts=%d", o.Attempt)
	}
	if o.Edge != "" {
		fmt.Fprintf(&b, " edge=%q", o.Edge)
	}
	if o.Target != nil {
		fmt.Fprintf(&b, " target=%q", o.Target.Desc)
	}
	if o.Responded {
		b.WriteString(" responded")
	}
	if o.Err != nil {
		fmt.Fprintf(&b, " error=%s", o.Err.Code())
	}
	if agg, ok := o.Outputs["aggregated"]; ok {
		fmt.Fprintf(&b, " aggregated=%v", agg)
	}
	b.WriteString("\n")
	return b.String()
}

func writeHeaders(b *strings.Builder, h http.Header, skip map[string]bool) {
	names := make([]string, 0, len(h))
	for k := range h {
		if !skip[k] {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range h[k] {
			fmt.Fprintf(b, "%s: %s\n", k, v)
		}
	}
}

func writeBody(b *strings.Builder, body []byte) {
	if len(body) == 0 {
		b.WriteString("(empty body)\n")
		return
	}
	if !utf8.Valid(body) {
		fmt.Fprintf(b, "(binary body, %d bytes, base64)\n%s\n", len(body), base64.StdEncoding.EncodeToString(body))
		return
	}
	b.Write(body)
	b.WriteString("\n")
	if body[len(body)-1] == '\n' {
		b.WriteString("(the body ends with a newline)\n")
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// normaliser replaces nondeterministic values (doc.go), numbering them by
// first appearance; one normaliser covers both goldens of a case.
type normaliser struct {
	urls        map[string]string // fake base URL → name
	clientTrace string            // the client's traceparent trace id and span id, if any
	clientSpan  string
	seen        map[string]map[string]string // class → raw → replacement
}

var (
	reUUID   = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	reUUIDv4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	reRoom   = regexp.MustCompile(`("bootstrap_room":\s*)(-?[0-9][0-9.eE+-]*)`)
	reTrace  = regexp.MustCompile(`(?m)^(Traceparent: [0-9a-f]{2}-)([0-9a-f]{32})-([0-9a-f]{16})(-[0-9a-f]{2})$`)
)

func newNormaliser(urls map[string]string, clientTraceparent string) *normaliser {
	n := &normaliser{urls: urls, seen: map[string]map[string]string{}}
	if p := strings.Split(clientTraceparent, "-"); len(p) == 4 {
		n.clientTrace, n.clientSpan = p[1], p[2]
	}
	return n
}

func (n *normaliser) name(class, raw string) string {
	m := n.seen[class]
	if m == nil {
		m = map[string]string{}
		n.seen[class] = m
	}
	if r, ok := m[raw]; ok {
		return r
	}
	r := fmt.Sprintf("<%s%d>", class, len(m)+1)
	m[raw] = r
	return r
}

func (n *normaliser) apply(s string) string {
	// Longest URL first: one base URL never prefixes another (distinct
	// ports), but be safe.
	urls := make([]string, 0, len(n.urls))
	for u := range n.urls {
		urls = append(urls, u)
	}
	sort.Slice(urls, func(i, j int) bool { return len(urls[i]) > len(urls[j]) })
	for _, u := range urls {
		s = strings.ReplaceAll(s, u, "http://"+n.urls[u])
		s = strings.ReplaceAll(s, strings.TrimPrefix(u, "http://"), n.urls[u])
	}
	s = reTrace.ReplaceAllStringFunc(s, func(m string) string {
		p := reTrace.FindStringSubmatch(m)
		trace, span := p[2], p[3]
		if trace != n.clientTrace {
			trace = n.name("TRACE", trace)
		}
		if span != n.clientSpan {
			span = n.name("SPAN", span)
		}
		return p[1] + trace + "-" + span + p[4]
	})
	s = reUUID.ReplaceAllStringFunc(s, func(m string) string { return n.name("UUID", m) })
	s = reRoom.ReplaceAllStringFunc(s, func(m string) string {
		p := reRoom.FindStringSubmatch(m)
		return p[1] + n.name("ROOM", p[2])
	})
	return s
}

// compareGolden checks got against path, or writes it with -update.
func compareGolden(path, got string, update bool) error {
	if update {
		return os.WriteFile(path, []byte(got), 0o644)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%v (run with -update to create it)", err)
	}
	if string(want) == got {
		return nil
	}
	return fmt.Errorf("%s differs (run with -update, then review):\n%s", filepath.Base(path), lineDiff(string(want), got))
}

// lineDiff shows the first differing lines with a little context.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	var b strings.Builder
	for k := max(0, i-3); k < i; k++ {
		fmt.Fprintf(&b, "   %s\n", cut(w[k]))
	}
	for k := i; k < min(len(w), i+6); k++ {
		fmt.Fprintf(&b, " - %s\n", cut(w[k]))
	}
	for k := i; k < min(len(g), i+6); k++ {
		fmt.Fprintf(&b, " + %s\n", cut(g[k]))
	}
	return b.String()
}

func cut(s string) string {
	if len(s) > 400 {
		return s[:400] + "…"
	}
	return s
}
