package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// Assumption is what a stubbed node "does" in explain and in tests: an
// upstream HTTP status (2xx succeeds, and answers the client when the node
// responds; 4xx is an upstream rejection; 5xx a bad gateway), or a word:
// succeeded, answered, failed (502), timed_out, panic. Attempts and Items
// refine it: one assumption per attempt, or per fan-out item (each of
// which may have Attempts); the last entry of either list repeats.
type Assumption struct {
	HTTP     int
	Word     string
	Attempts []Assumption
	Items    []Assumption
}

// For is the plain assumption of one attempt (1-based) of one item (-1 for
// a node that does not fan out).
func (a Assumption) For(attempt, item int) Assumption {
	if len(a.Items) > 0 && item >= 0 {
		a = a.Items[min(item, len(a.Items)-1)]
	}
	if len(a.Attempts) > 0 {
		a = a.Attempts[min(max(attempt, 1), len(a.Attempts))-1]
	}
	return a
}

// ParseAssumptions reads the CLI form: one assumption, or a comma-separated
// list of them, one per attempt ("503,200": the retry succeeds).
func ParseAssumptions(s string) (Assumption, error) {
	parts := strings.Split(s, ",")
	if len(parts) == 1 {
		return ParseAssumption(s)
	}
	var a Assumption
	for _, p := range parts {
		x, err := ParseAssumption(strings.TrimSpace(p))
		if err != nil {
			return Assumption{}, err
		}
		a.Attempts = append(a.Attempts, x)
	}
	return a, nil
}

// ParseAssumption reads "412", "answered", "failed", ...
func ParseAssumption(s string) (Assumption, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 100 || n > 599 {
			return Assumption{}, fmt.Errorf("HTTP status %d out of range", n)
		}
		return Assumption{HTTP: n}, nil
	}
	switch s {
	case "succeeded", "answered", "failed", "timed_out", "panic":
		return Assumption{Word: s}, nil
	}
	return Assumption{}, fmt.Errorf("unknown assumption %q (want an HTTP status or succeeded, answered, failed, timed_out, panic)", s)
}

func (a Assumption) String() string {
	switch {
	case len(a.Items) > 0:
		parts := make([]string, len(a.Items))
		for i, x := range a.Items {
			parts[i] = x.String()
		}
		return "items[" + strings.Join(parts, " ") + "]"
	case len(a.Attempts) > 0:
		parts := make([]string, len(a.Attempts))
		for i, x := range a.Attempts {
			parts[i] = x.String()
		}
		return strings.Join(parts, ",")
	case a.HTTP != 0:
		return strconv.Itoa(a.HTTP)
	}
	return a.Word
}

// Probe is the request explain and tests run: a route, a client body and
// headers, and how many prompt tokens a render stub reports.
type Probe struct {
	Route   Route
	Body    []byte
	Headers http.Header
	Tokens  int    // 0: 16
	Variant string // the Variant.Mark explained, "" for none (Run.Variant)
}

// Explain runs the real compiled workflow and scheduler for one request,
// with every node's execution replaced by its assumption. The request goes
// through the workflow's entry first, the function serve runs
// (LoadOptions.Entry): the same header map, request id, body checks and
// entry data; a request serve refuses before any node runs returns a
// *Refused. A node without an assumption previews what it would do when its
// type can tell without I/O (Previewer: fetch-media's media items, the
// async-broker's modes), else answers the client if it responds and
// succeeds otherwise. It never touches the network. Stubs that provide
// tokens report Probe.Tokens of them.
func (w *Workflow) Explain(ctx context.Context, p Probe, assume map[string]Assumption) (*Report, error) {
	for id := range assume {
		if w.index(id) < 0 {
			return nil, fmt.Errorf("--assume names unknown node %q", id)
		}
	}
	entry := w.entry
	if entry == nil {
		entry = coreEntry
	}
	in, e := entry(p.Route, p.Headers, p.Body)
	if e != nil {
		return nil, &Refused{Err: e}
	}
	sw := w.stubbed(p, assume)
	run := NewRun(ctx, in.Req, discard{})
	run.Stubbed = true
	run.Variant = p.Variant
	run.State.BodyObj = in.Obj
	run.State.Tokens = in.Tokens
	run.State.Media = in.Media
	rep := sw.Serve(run)
	for k := range rep.Outcomes {
		if i := w.index(rep.Outcomes[k].Node); i >= 0 {
			if nt, ok := w.nodes[i].node.(Noter); ok {
				rep.Outcomes[k].Note = nt.ExplainNote()
			}
		}
	}
	return rep, nil
}

// Noter is a node type whose legs do something explain should say beside
// the node's line, the same for every request (decode: how often a leg
// that failed before its first byte is sent again, and its fallback
// pool): a short phrase, "" for nothing.
type Noter interface {
	ExplainNote() string
}

// Refused is a request serve answers at entry, before any node runs
// (Explain's error for it).
type Refused struct{ Err *Error }

func (r *Refused) Error() string {
	return fmt.Sprintf("serve answers HTTP %d %s before any node runs: %s", r.Err.HTTPStatus(), r.Err.Code(), r.Err.Msg)
}

// Previewer is a node type that can tell without I/O what it would do for a
// request: explain and the tests: block run Preview in place of a node that
// has no assumption. Preview must not block, call a worker or touch Redis;
// it sees the same Exec as Run.
type Previewer interface {
	Preview(ctx context.Context, x *Exec) Result
}

// Variant is one way a request could be sent that a node type tells apart
// (the async-broker's mode header): a name for the reader and the headers
// that select it.
type Variant struct {
	Name   string
	Header http.Header
	// Mark tells the node's Previewer which of the variants the headers
	// select it is (Run.Variant), for outcomes no header selects: the
	// async-broker's wait that outlives async.wait_cap and answers 202.
	Mark string
}

// Varier is a node type whose behaviour turns on client headers the request
// may not carry: Variants lists, for the headers h, the variants worth
// explaining (none when h already selects one).
type Varier interface {
	Variants(h http.Header) []Variant
}

// Variants returns the variants of the workflow's nodes for headers h, in
// node order: explain shows one path per variant.
func (w *Workflow) Variants(h http.Header) []Variant {
	var out []Variant
	for _, n := range w.nodes {
		if v, ok := n.node.(Varier); ok {
			out = append(out, v.Variants(h)...)
		}
	}
	return out
}

// generateTokens reads a generate body's token_ids as the front would need
// them: an array of integers (the front's full validation, ranges and
// features included, lives in connectors/mm; explain only needs the count and
// values CEL can see).
func generateTokens(body []byte) (Tokens, error) {
	var g struct {
		TokenIDs *[]int64 `json:"token_ids"`
	}
	if err := json.Unmarshal(body, &g); err != nil || g.TokenIDs == nil {
		return Tokens{}, fmt.Errorf("a generate request needs token_ids, an array of integers (the front answers 400 invalid_request without it)")
	}
	return Tokens{Known: true, IDs: *g.TokenIDs}, nil
}

func (w *Workflow) index(id string) int {
	for i, n := range w.nodes {
		if n.id == id {
			return i
		}
	}
	return -1
}

// stubbed copies the workflow with stub nodes; compiled expressions are shared.
func (w *Workflow) stubbed(p Probe, assume map[string]Assumption) *Workflow {
	c := *w
	c.pool = &sync.Pool{}
	c.nodes = make([]*cnode, len(w.nodes))
	for i, n := range w.nodes {
		cn := *n
		a, ok := assume[n.id]
		st := &stub{c: n.contract, p: p}
		if pv, can := n.node.(Previewer); can && !ok {
			st.preview = pv
		}
		if !ok {
			a = Assumption{Word: "succeeded"}
			if n.contract.Responds {
				a.Word = "answered"
			}
		}
		st.a = a
		cn.node = st
		cn.merger = nil
		c.nodes[i] = &cn
	}
	return &c
}

// stub is a node that does what it is told.
type stub struct {
	a       Assumption
	c       Contract
	p       Probe
	preview Previewer // the real node, when it previews and has no assumption
}

func (s *stub) Contract() Contract { return s.c }

func (s *stub) Run(ctx context.Context, x *Exec) Result {
	if err := ctx.Err(); err != nil {
		return Result{Err: err}
	}
	if s.preview != nil {
		return s.preview.Preview(ctx, x)
	}
	a := s.a.For(x.Attempt, x.Index)
	switch {
	case a.Word == "panic":
		panic("assumed panic")
	case a.Word == "failed":
		return Result{HTTPStatus: 502, Err: Errorf(KindBadGateway, "assumed failure")}
	case a.Word == "timed_out":
		return Result{Err: Errorf(KindUpstreamTimeout, "assumed timeout")}
	case a.HTTP >= 500:
		return Result{HTTPStatus: a.HTTP, Err: UpstreamStatus(a.HTTP, "", "", 0)} // as a real leg would
	case a.HTTP >= 300:
		return Result{HTTPStatus: a.HTTP, Err: &Error{Kind: KindUpstreamRejected, Item: -1, Status: a.HTTP}}
	}
	if x.Index < 0 { // effects once per node, not per item
		s.effects(x.Run)
	}
	status := a.HTTP
	if s.c.Responds && (a.Word == "answered" || a.HTTP != 0) {
		if status == 0 {
			status = 200
		}
		if w, ok := x.Run.Answer(); ok {
			w.WriteHeader(status)
		}
		return Result{HTTPStatus: status, Responded: true}
	}
	return Result{HTTPStatus: status}
}

// effects does what the node's provided keys say a real node would leave
// in the run; each key knows its own stub (Key.Stub), so the core needs no
// knowledge of what nodes hand each other.
func (s *stub) effects(r *Run) {
	for _, k := range s.c.Provides {
		k.stub(r, s.p)
	}
}

func stubTokens(p Probe) Tokens {
	if p.Route == RouteGenerate {
		if t, err := generateTokens(p.Body); err == nil {
			return t
		}
	}
	n := p.Tokens
	if n <= 0 {
		n = 16
	}
	return Tokens{Known: true, IDs: make([]int64, n)}
}

// scanMedia finds media parts the way fetch-media would, for stubs only:
// chat content parts image_url, video_url, audio_url and input_audio;
// generate features.mm_hashes per modality.
func scanMedia(route Route, body []byte) []MediaItem {
	var out []MediaItem
	add := func(mod string, remote bool) {
		part := 0
		for _, m := range out {
			if m.Modality == mod {
				part++
			}
		}
		out = append(out, MediaItem{Index: len(out), Modality: mod, Part: part, Remote: remote})
	}
	if route == RouteGenerate {
		var g struct {
			Features struct {
				Hashes map[string][]string `json:"mm_hashes"`
			} `json:"features"`
		}
		_ = json.Unmarshal(body, &g)
		for _, mod := range []string{"image", "video", "audio"} {
			for range g.Features.Hashes[mod] {
				add(mod, false)
			}
		}
		return out
	}
	var chat struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &chat)
	for _, m := range chat.Messages {
		var parts []map[string]json.RawMessage
		if json.Unmarshal(m.Content, &parts) != nil {
			continue
		}
		for _, p := range parts {
			var t string
			_ = json.Unmarshal(p["type"], &t)
			switch t {
			case "image_url", "video_url", "audio_url":
				var u struct {
					URL string `json:"url"`
				}
				_ = json.Unmarshal(p[t], &u)
				add(strings.TrimSuffix(t, "_url"), !strings.HasPrefix(u.URL, "data:"))
			case "input_audio":
				add("audio", false)
			}
		}
	}
	return out
}

// discard is the client of an explained run.
type discard struct{ h http.Header }

func (d discard) Header() http.Header {
	if d.h == nil {
		return http.Header{}
	}
	return d.h
}
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// FormatReport prints one line per node: its decision and why.
func FormatReport(rep *Report) string {
	var b strings.Builder
	width := 4
	for _, o := range rep.Outcomes {
		width = max(width, len(o.Node))
	}
	for _, o := range rep.Outcomes {
		fmt.Fprintf(&b, "%-*s  %-9s  %s\n", width, o.Node, decision(o), explainLine(o))
	}
	switch {
	case rep.Answered && rep.Err != nil:
		fmt.Fprintf(&b, "result: answered, then failed: %s\n", rep.Err.Error())
	case rep.Answered:
		fmt.Fprintf(&b, "result: answered by %s\n", answeredBy(rep))
	case rep.Err != nil:
		fmt.Fprintf(&b, "result: HTTP %d %s: %s\n", rep.Err.HTTPStatus(), rep.Err.Code(), rep.Err.ClientMessage("explain"))
	}
	return b.String()
}

func decision(o Outcome) string {
	switch o.Status {
	case StatusSucceeded, StatusFailed, StatusTimedOut:
		return "ran"
	case StatusSkipped:
		return "skipped"
	case StatusOmitted:
		return "omitted"
	case StatusCancelled:
		return "cancelled"
	}
	return o.Status.String()
}

func explainLine(o Outcome) string {
	var parts []string
	if o.Status == StatusSucceeded || o.Status == StatusFailed || o.Status == StatusTimedOut {
		s := o.Status.String()
		if o.Responded {
			s = "answered the client"
		}
		if o.HTTPStatus != 0 {
			s += ", HTTP " + strconv.Itoa(o.HTTPStatus)
		}
		parts = append(parts, s)
		if len(o.Items) > 0 {
			parts = append(parts, strconv.Itoa(len(o.Items))+" items")
		}
		if o.Attempt > 1 {
			parts = append(parts, "attempt "+strconv.Itoa(o.Attempt))
		}
	}
	if o.Reason != "" && o.Status != StatusSucceeded {
		parts = append(parts, o.Reason)
	}
	if o.Edge != "" {
		parts = append(parts, "via "+o.Edge)
	}
	if o.Target != nil {
		parts = append(parts, o.Target.Desc)
	}
	for _, ce := range o.CELErrors {
		parts = append(parts, "CEL error in "+ce.Expr+" ("+ce.Error+"): "+ce.Effect())
	}
	if o.Note != "" && (o.Status == StatusSucceeded || o.Status == StatusFailed || o.Status == StatusTimedOut) {
		parts = append(parts, o.Note)
	}
	return strings.Join(parts, "; ")
}

func answeredBy(rep *Report) string {
	for _, o := range rep.Outcomes {
		if o.Responded {
			return o.Node
		}
	}
	return ""
}
