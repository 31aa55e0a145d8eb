package replay

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// Stream is one client's SSE reply kept across the decode legs that make
// it: the first, then each continuation. It relays every event as it
// arrives (one write and one flush per event, as the plain relay), minus
// the token ids celflow asked for and the client did not, and remembers
// what the client was sent: the reply's id, created and model, the
// prompt's token ids, the token ids generated so far, whether the final
// chunk, the usage chunk and [DONE] went out. A continuation's events are
// rewritten to match: the first leg's id, created and model; a chat
// reply's chunks rebuilt from the first leg's own last chunk (so the shape
// is the worker's: the same members in the same order); usage counting the
// original prompt and every generated token.
//
// A Stream is used by one goroutine.
type Stream struct {
	Route        engine.Route
	ClientIDs    bool // the client asked for return_token_ids itself: ids stay in its events
	IncludeUsage bool // stream_options.include_usage: the reply ends with a usage chunk

	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool

	id, created, model []byte // the first leg's, as JSON
	Prompt             []int64
	PromptKnown        bool
	Gen                []int64 // token ids of everything the client was sent
	Events             int     // data events the client was sent
	Finished           bool    // the chunk with finish_reason went out
	UsageSent          bool
	Done               bool // [DONE] went out
	MissingIDs         bool // a content event came without token_ids
	Tool               bool // a tool call was in flight
	Reasoning          bool // reasoning text was in flight
	usageMember        bool // the worker's chunks carry a usage member (include_usage)
	template           []byte
	leg                int  // 0: the first leg; then each continuation
	convert            bool // this leg is a completions continuation of a chat reply
	Bytes              int64
	// UpstreamBytes counts the bytes read from the legs.
	UpstreamBytes int64
	out           []byte       // writeEvent's buffer
	eb            bytes.Buffer // built's
	// FirstByte, when set, is called (and cleared) when the next event
	// goes to the client: a continuation's first (the stall ends).
	FirstByte func()
}

// NewStream starts a stream to w for a request of route. The generate
// route's replies are token ids: they are never stripped.
func NewStream(w http.ResponseWriter, route engine.Route, clientIDs, includeUsage bool) *Stream {
	clientIDs = clientIDs || route == engine.RouteGenerate
	return &Stream{Route: route, ClientIDs: clientIDs, IncludeUsage: includeUsage, w: w, rc: http.NewResponseController(w)}
}

// idKey is the member that names the reply: generate's request_id, else id.
func (s *Stream) idKey() string {
	if s.Route == engine.RouteGenerate {
		return "request_id"
	}
	return "id"
}

// Start writes the reply's status and headers from the first leg's answer
// (later legs' headers are not the client's business); it flushes, so the
// client sees the status before the first event.
func (s *Stream) Start(resp *http.Response, reqID string) {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	upstream.CopyReplyHeaders(h, resp.Header)
	delete(h, "Content-Length")
	delete(h, "Content-Encoding") // the leg was read decoded (not a relay leg)
	if reqID != "" {
		h["X-Request-Id"] = []string{reqID}
	}
	_ = s.rc.SetWriteDeadline(noDeadline)
	s.w.WriteHeader(resp.StatusCode)
	_ = s.rc.Flush()
}

// Started reports whether the status went out.
func (s *Stream) Started() bool { return s.started }

// Continue prepares the stream for the next leg, a continuation sent to
// /v1/completions.
func (s *Stream) Continue() {
	s.leg++
	s.convert = s.Route == engine.RouteChat
}

// Break is why a leg's reply ended before [DONE].
type Break struct {
	Reason string // ReasonReset, ReasonIdle, ReasonErrorEvent
	Err    error
}

func (b *Break) Error() string {
	if b.Err != nil {
		return "decode reply broke (" + b.Reason + "): " + b.Err.Error()
	}
	return "decode reply broke (" + b.Reason + ")"
}

func (b *Break) Unwrap() error { return b.Err }

// ClientError is a failed write to the client: no failover helps.
type ClientError struct{ Err error }

func (c *ClientError) Error() string { return "writing to the client: " + c.Err.Error() }
func (c *ClientError) Unwrap() error { return c.Err }

var errNoDone = errors.New("the reply ended without [DONE]")

// Pump relays one leg's events until [DONE] (nil), a break (*Break) or a
// failed client write (*ClientError). body is closed by the caller.
func (s *Stream) Pump(body io.Reader) error {
	br := bufio.NewReaderSize(body, 16<<10)
	var ev []byte // the event being read, lines included
	var data []byte
	hasData := false
	for {
		line, err := readLine(br, &s.UpstreamBytes)
		if len(line) > 0 {
			t := trimEOL(line)
			if len(t) > 0 {
				ev = append(ev, line...)
				if v, ok := field(t, "data"); ok {
					if hasData {
						data = append(data, '\n')
					}
					data = append(data, v...)
					hasData = true
				}
			} else if err == nil { // a blank line ends the event
				if hasData {
					out, brk := s.process(data)
					if brk != nil {
						return brk
					}
					if out != nil {
						if f := s.FirstByte; f != nil {
							s.FirstByte = nil
							f()
						}
						if werr := s.writeEvent(out); werr != nil {
							return werr
						}
					}
					if s.Done {
						return nil
					}
				} else if len(ev) > 0 && s.leg == 0 && !loneCR(ev) { // a comment or another field: passed on
					if werr := s.write(append(ev, '\n')); werr != nil {
						return werr
					}
				}
				ev, data, hasData = ev[:0], data[:0], false
			}
		}
		if err == nil {
			continue
		}
		if err == io.EOF {
			return &Break{Reason: ReasonReset, Err: errNoDone}
		}
		var te *upstream.TimeoutError
		if errors.As(err, &te) {
			return &Break{Reason: ReasonIdle, Err: err}
		}
		return &Break{Reason: ReasonReset, Err: err}
	}
}

// readLine reads one line, however long (a first event carrying a long
// prompt's ids exceeds any buffer).
func readLine(br *bufio.Reader, n *int64) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	*n += int64(len(line))
	if err != bufio.ErrBufferFull {
		return line, err
	}
	buf := append([]byte(nil), line...)
	for err == bufio.ErrBufferFull {
		line, err = br.ReadSlice('\n')
		*n += int64(len(line))
		buf = append(buf, line...)
	}
	return buf, err
}

// loneCR reports a CR that does not end a line in b: the client's
// EventSource ends a line there (this reader does not), so such an event
// would reach it as other lines, an empty data line among them perhaps.
// It is not passed on.
func loneCR(b []byte) bool {
	for i, c := range b {
		if c == '\r' && (i+1 == len(b) || b[i+1] != '\n') {
			return true
		}
	}
	return false
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// field is the value of an SSE line "name: value" (one optional space);
// a line that is the name alone is the field with an empty value (as the
// client's EventSource reads it: "data" alone is an empty data line).
func field(line []byte, name string) ([]byte, bool) {
	if string(line) == name {
		return nil, true
	}
	if len(line) < len(name)+1 || string(line[:len(name)]) != name || line[len(name)] != ':' {
		return nil, false
	}
	v := line[len(name)+1:]
	if len(v) > 0 && v[0] == ' ' {
		v = v[1:]
	}
	return v, true
}

var (
	doneData   = []byte("[DONE]")
	noDeadline time.Time // streams get no write deadline (docs/protocol.md, Timeouts)
)

// process judges one data event: what to send the client (nil: nothing)
// or a break.
func (s *Stream) process(data []byte) ([]byte, *Break) {
	if bytes.Equal(bytes.TrimSpace(data), doneData) {
		s.Done = true
		return data, nil
	}
	if !s.convert {
		if out, ok := s.fastEvent(data); ok {
			return out, nil
		}
	}
	obj, err := jsonb.Parse(data)
	if err != nil {
		return nil, &Break{Reason: ReasonErrorEvent, Err: errors.New("the worker sent an event that is not a JSON object")}
	}
	if _, ok := obj.Get("error"); ok {
		// vLLM's mid-stream failure: data: {"error": {...}}. Never relayed as
		// such when a continuation can take over; the caller decides.
		return nil, &Break{Reason: ReasonErrorEvent, Err: errors.New("the worker sent an error event")}
	}
	if s.convert {
		return s.convertEvent(obj)
	}
	return s.passEvent(obj)
}

// fastEvent is passEvent for the common event of the first leg, one
// content chunk, read with jsonb's walk functions (no index, no editor, no
// allocation): the hot path of a decode that does not fail. Anything else
// (the first event, which names the reply and may carry the prompt's ids;
// an error event; usage; several choices; a continuation) returns ok
// false and takes the indexed path. The walk functions never read out of
// bounds; on bytes that are not JSON they stop early and ok is false.
func (s *Stream) fastEvent(data []byte) (out []byte, ok bool) {
	if s.leg > 0 || s.id == nil {
		return nil, false
	}
	start := jsonb.SkipWS(data, 0)
	cs := -1
	ok = true
	err := jsonb.EachMember(data, start, func(f jsonb.Field) bool {
		switch {
		case f.KeyIs("choices"):
			cs = f.ValStart
		case f.KeyIs("error"), f.KeyIs("prompt_token_ids"):
			ok = false
		case f.KeyIs("usage"):
			s.usageMember = true
			if string(data[f.ValStart:f.ValEnd]) != "null" {
				ok = false
			}
		}
		return ok
	})
	if err != nil || !ok || cs < 0 || data[cs] != '[' {
		return nil, false
	}
	n, chStart := 0, -1
	if jsonb.EachElement(data, cs, func(vs, ve int) bool {
		n++
		chStart = vs
		return n < 2
	}) != nil || n != 1 || data[chStart] != '{' {
		return nil, false
	}
	idKey, idEnd := -1, -1 // the token_ids member: its key's quote, its value's end
	var ids, text []byte
	finished, tool, reasoning := false, false, false
	err = jsonb.EachMember(data, chStart, func(f jsonb.Field) bool {
		v := data[f.ValStart:f.ValEnd]
		switch {
		case f.KeyIs("token_ids"):
			idKey, idEnd, ids = f.KeyStart, f.ValEnd, v
		case f.KeyIs("prompt_token_ids"):
			ok = false
		case f.KeyIs("finish_reason"):
			finished = string(v) != "null"
		case f.KeyIs("text"):
			text = v
		case f.KeyIs("delta"):
			if len(v) == 0 || v[0] != '{' {
				return true
			}
			_ = jsonb.EachMember(data, f.ValStart, func(d jsonb.Field) bool {
				dv := data[d.ValStart:d.ValEnd]
				switch {
				case d.KeyIs("content"):
					text = dv
				case d.KeyIs("tool_calls"):
					tool = string(dv) != "null" && string(dv) != "[]"
				case d.KeyIs("reasoning_content"), d.KeyIs("reasoning"):
					reasoning = reasoning || string(dv) != "null" && string(dv) != `""`
				}
				return true
			})
		}
		return ok
	})
	if err != nil || !ok {
		return nil, false
	}
	if ids != nil {
		s.Gen = appendParsedIDs(s.Gen, ids)
	} else if len(text) > 2 && string(text) != "null" {
		s.MissingIDs = true
	}
	s.Finished = s.Finished || finished
	s.Tool = s.Tool || tool
	s.Reasoning = s.Reasoning || reasoning
	s.Events++
	s.template = append(s.template[:0], data...)
	if ids == nil || s.ClientIDs {
		return data, true
	}
	// Cut the member with one of its separators: the comma before it, or
	// (first member) the one after it.
	cut0, cut1 := idKey, idEnd
	if j := lastNonWS(data, idKey); j >= 0 && data[j] == ',' {
		cut0 = j
	} else if k := jsonb.SkipWS(data, idEnd); k < len(data) && data[k] == ',' {
		cut1 = k + 1
	}
	s.eb.Reset()
	s.eb.Write(data[:cut0])
	s.eb.Write(data[cut1:])
	return s.eb.Bytes(), true
}

// lastNonWS is the offset of the last byte before i that is not JSON white
// space, -1 when none.
func lastNonWS(b []byte, i int) int {
	for i--; i >= 0; i-- {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return i
		}
	}
	return -1
}

// passEvent handles an event of the client's own format: the first leg's,
// or a completions continuation of a completions reply.
func (s *Stream) passEvent(obj *jsonb.Object) ([]byte, *Break) {
	data := obj.Buf
	var ed *jsonb.Editor
	edit := func() *jsonb.Editor {
		if ed == nil {
			ed = jsonb.NewEditor(data)
		}
		return ed
	}
	top := (*jsonb.ObjectEditor)(nil)
	topEd := func() *jsonb.ObjectEditor {
		if top == nil {
			top = edit().In(obj)
		}
		return top
	}
	if s.id == nil {
		s.id, _ = obj.Get(s.idKey())
		s.created, _ = obj.Get("created")
		s.model, _ = obj.Get("model")
		s.id, s.created, s.model = clone(s.id), clone(s.created), clone(s.model)
		if s.id == nil {
			s.id = []byte{} // none: still known
		}
	} else if s.leg > 0 {
		if len(s.id) > 0 {
			topEd().SetIfPresent(s.idKey(), s.id)
		}
		if len(s.created) > 0 {
			topEd().SetIfPresent("created", s.created)
		}
		if len(s.model) > 0 {
			topEd().SetIfPresent("model", s.model)
		}
	}
	if v, ok := obj.Get("prompt_token_ids"); ok { // chat: the first event
		s.notePrompt(v)
		if !s.ClientIDs {
			topEd().Delete("prompt_token_ids")
		}
	}
	usage, hasUsage := obj.Get("usage")
	if hasUsage {
		s.usageMember = true
	}
	nChoices := 0
	if i := obj.Find("choices"); i >= 0 {
		m := obj.Members[i]
		_ = jsonb.EachElement(data, m.ValStart, func(vs, ve int) bool {
			nChoices++
			c, err := jsonb.ObjectAt(data, vs)
			if err != nil {
				return true
			}
			var ce *jsonb.ObjectEditor
			cEd := func() *jsonb.ObjectEditor {
				if ce == nil {
					ce = edit().In(c)
				}
				return ce
			}
			if v, ok := c.Get("prompt_token_ids"); ok { // completions: a choice's first event
				if s.leg == 0 {
					s.notePrompt(v)
				}
				if !s.ClientIDs || s.leg > 0 {
					cEd().Delete("prompt_token_ids")
				}
			}
			s.noteChoice(c, cEd)
			return true
		})
	}
	if hasUsage && !bytes.Equal(usage, null) {
		// The usage chunk (choices: []), or vLLM's continuous_usage_stats
		// on every chunk: a continuation's counts its own prompt and answer.
		if nChoices == 0 {
			s.UsageSent = true
		}
		if s.leg > 0 {
			topEd().Set("usage", s.usage(usage))
		}
	}
	s.Events++
	if nChoices > 0 {
		s.template = append(s.template[:0], data...)
	}
	if ed == nil {
		return data, nil
	}
	return s.built(ed), nil
}

// noteChoice records what one choice of an event says, and strips the
// token ids the client did not ask for.
func (s *Stream) noteChoice(c *jsonb.Object, cEd func() *jsonb.ObjectEditor) {
	ids, hasIDs := c.Get("token_ids")
	if hasIDs {
		s.Gen = appendParsedIDs(s.Gen, ids)
		if !s.ClientIDs {
			cEd().Delete("token_ids")
		}
	}
	var text []byte
	if d, ok := c.Get("delta"); ok { // chat
		if v, ok := member(d, "content"); ok {
			text = v
		}
		if v, ok := member(d, "tool_calls"); ok && !bytes.Equal(v, null) && !bytes.Equal(v, []byte("[]")) {
			s.Tool = true
		}
		for _, k := range []string{"reasoning_content", "reasoning"} {
			if v, ok := member(d, k); ok && !bytes.Equal(v, null) && !bytes.Equal(v, []byte(`""`)) {
				s.Reasoning = true
			}
		}
	} else if v, ok := c.Get("text"); ok {
		text = v
	}
	if !hasIDs && len(text) > 2 && !bytes.Equal(text, null) {
		s.MissingIDs = true // text without its ids: the prefix cannot be rebuilt
	}
	if f, ok := c.Get("finish_reason"); ok && !bytes.Equal(f, null) {
		s.Finished = true
	}
}

// convertEvent rebuilds a completions continuation event as a chat chunk,
// from the first leg's last chunk (the template).
func (s *Stream) convertEvent(obj *jsonb.Object) ([]byte, *Break) {
	data := obj.Buf
	var text, finish, stop []byte
	nChoices := 0
	if i := obj.Find("choices"); i >= 0 {
		_ = jsonb.EachElement(data, obj.Members[i].ValStart, func(vs, ve int) bool {
			nChoices++
			c, err := jsonb.ObjectAt(data, vs)
			if err != nil {
				return true
			}
			if ids, ok := c.Get("token_ids"); ok {
				s.Gen = appendParsedIDs(s.Gen, ids)
			} else if t, ok := c.Get("text"); ok && len(t) > 2 {
				s.MissingIDs = true
			}
			text, _ = c.Get("text")
			finish, _ = c.Get("finish_reason")
			stop, _ = c.Get("stop_reason")
			return true
		})
	}
	usage, hasUsage := obj.Get("usage")
	tpl, err := jsonb.Parse(s.template)
	if err != nil {
		return nil, &Break{Reason: ReasonErrorEvent, Err: err}
	}
	ed := jsonb.NewEditor(s.template)
	te := ed.In(tpl)
	te.Delete("prompt_token_ids")
	if nChoices == 0 {
		if !hasUsage || bytes.Equal(usage, null) {
			return nil, nil
		}
		te.Set("choices", []byte("[]"))
		te.Set("usage", s.usage(usage))
		s.UsageSent = true
		s.Events++
		return ed.Body().Bytes(), nil
	}
	empty := len(text) == 0 || bytes.Equal(text, []byte(`""`)) || bytes.Equal(text, null)
	done := len(finish) > 0 && !bytes.Equal(finish, null)
	if empty && !done {
		return nil, nil
	}
	if hasUsage && !bytes.Equal(usage, null) {
		te.Set("usage", s.usage(usage)) // continuous_usage_stats
	} else if s.usageMember {
		te.SetIfPresent("usage", null)
	}
	i := tpl.Find("choices")
	var c *jsonb.Object
	_ = jsonb.EachElement(s.template, tpl.Members[i].ValStart, func(vs, ve int) bool {
		c, _ = jsonb.ObjectAt(s.template, vs)
		return false
	})
	if c == nil {
		return nil, &Break{Reason: ReasonErrorEvent, Err: errors.New("no chat chunk to continue from")}
	}
	ce := ed.In(c)
	if empty {
		ce.Set("delta", []byte("{}"))
	} else {
		ce.Set("delta", append(append([]byte(`{"content":`), text...), '}'))
	}
	if done {
		ce.Set("finish_reason", finish)
		s.Finished = true
	} else {
		ce.Set("finish_reason", null)
	}
	if stop != nil {
		ce.SetIfPresent("stop_reason", stop)
	} else {
		ce.SetIfPresent("stop_reason", null)
	}
	if s.ClientIDs {
		if ids, ok := tokenIDsOf(obj); ok {
			ce.Set("token_ids", ids)
		}
	} else {
		ce.Delete("token_ids")
	}
	s.Events++
	return ed.Body().Bytes(), nil
}

// tokenIDsOf is the first choice's token_ids of an event.
func tokenIDsOf(obj *jsonb.Object) (out []byte, ok bool) {
	i := obj.Find("choices")
	if i < 0 {
		return nil, false
	}
	_ = jsonb.EachElement(obj.Buf, obj.Members[i].ValStart, func(vs, ve int) bool {
		if c, err := jsonb.ObjectAt(obj.Buf, vs); err == nil {
			out, ok = c.Get("token_ids")
		}
		return false
	})
	return out, ok
}

// usage is a continuation's usage object counting the whole answer: the
// original prompt and every generated token (the continuation's own
// prompt_tokens count the answer's prefix again, and its cache hits are
// not the client's).
func (s *Stream) usage(u []byte) []byte {
	p := int64(len(s.Prompt))
	c := int64(len(s.Gen))
	obj, err := jsonb.Parse(u)
	if err != nil {
		return u
	}
	ed := jsonb.NewEditor(u)
	oe := ed.In(obj)
	oe.SetIfPresent("prompt_tokens", strconv.AppendInt(nil, p, 10))
	oe.SetIfPresent("completion_tokens", strconv.AppendInt(nil, c, 10))
	oe.SetIfPresent("total_tokens", strconv.AppendInt(nil, p+c, 10))
	// The continuation's cache hits are of its own prompt, which holds the
	// answer's prefix: never more than the original prompt's length.
	if d, ok := obj.Get("prompt_tokens_details"); ok {
		if v, ok := member(d, "cached_tokens"); ok {
			if ct, err := strconv.ParseInt(string(v), 10, 64); err == nil && ct > p {
				if de, ok := oe.Object("prompt_tokens_details"); ok {
					de.Set("cached_tokens", strconv.AppendInt(nil, p, 10))
				}
			}
		}
	}
	return ed.Body().Bytes()
}

func (s *Stream) notePrompt(v []byte) {
	if s.PromptKnown {
		return
	}
	s.Prompt = appendParsedIDs(s.Prompt[:0], v)
	s.PromptKnown = true
}

// SetPrompt gives the prompt's ids when the run knows them (render ran):
// the worker's own, when it sends them, win.
func (s *Stream) SetPrompt(ids []int64) {
	if !s.PromptKnown && ids != nil {
		s.Prompt = append(s.Prompt[:0], ids...)
	}
}

// HavePrompt reports whether the prompt's ids are known.
func (s *Stream) HavePrompt() bool { return s.PromptKnown || s.Prompt != nil }

// appendParsedIDs appends the integers of a JSON array (already valid).
func appendParsedIDs(dst []int64, raw []byte) []int64 {
	var n int64
	in, neg := false, false
	for _, b := range raw {
		switch {
		case b >= '0' && b <= '9':
			n = n*10 + int64(b-'0')
			in = true
		case b == '-':
			neg = true
		default:
			if in {
				if neg {
					n = -n
				}
				dst = append(dst, n)
			}
			n, in, neg = 0, false, false
		}
	}
	return dst
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// Finish ends a reply whose final chunk went out but whose leg broke
// before the usage chunk or [DONE]: it writes them itself.
func (s *Stream) Finish() error {
	if s.IncludeUsage && !s.UsageSent && s.template != nil {
		tpl, err := jsonb.Parse(s.template)
		if err == nil {
			ed := jsonb.NewEditor(s.template)
			te := ed.In(tpl)
			te.Delete("prompt_token_ids")
			te.Set("choices", []byte("[]"))
			p, c := int64(len(s.Prompt)), int64(len(s.Gen))
			u := `{"prompt_tokens":` + strconv.FormatInt(p, 10) + `,"total_tokens":` + strconv.FormatInt(p+c, 10) +
				`,"completion_tokens":` + strconv.FormatInt(c, 10) + `,"prompt_tokens_details":null}`
			te.Set("usage", []byte(u))
			if err := s.writeEvent(ed.Body().Bytes()); err != nil {
				return err
			}
			s.UsageSent = true
		}
	}
	if !s.Done {
		if err := s.writeEvent(doneData); err != nil {
			return err
		}
		s.Done = true
	}
	return nil
}

// FinishLength ends a reply whose token budget ran out exactly at the
// break (no continuation can be sent for zero tokens): a final chunk with
// finish_reason "length", then usage and [DONE].
func (s *Stream) FinishLength() error {
	if !s.Finished && s.template != nil {
		tpl, err := jsonb.Parse(s.template)
		if err == nil {
			ed := jsonb.NewEditor(s.template)
			te := ed.In(tpl)
			te.Delete("prompt_token_ids")
			if s.usageMember {
				te.SetIfPresent("usage", null)
			}
			i := tpl.Find("choices")
			var c *jsonb.Object
			_ = jsonb.EachElement(s.template, tpl.Members[i].ValStart, func(vs, ve int) bool {
				c, _ = jsonb.ObjectAt(s.template, vs)
				return false
			})
			if c != nil {
				ce := ed.In(c)
				if s.Route == engine.RouteChat {
					ce.Set("delta", []byte("{}"))
				} else {
					ce.SetIfPresent("text", []byte(`""`))
				}
				ce.Set("finish_reason", []byte(`"length"`))
				ce.SetIfPresent("stop_reason", null)
				ce.Delete("token_ids")
				ce.Delete("prompt_token_ids")
				if err := s.writeEvent(ed.Body().Bytes()); err != nil {
					return err
				}
				s.Finished = true
			}
		}
	}
	return s.Finish()
}

func (s *Stream) writeEvent(data []byte) error {
	s.out = append(s.out[:0], "data: "...)
	if bytes.IndexAny(data, "\r\n") < 0 {
		s.out = append(s.out, data...)
	} else {
		// An event the worker sent in several data lines (or JSON with a
		// CR or LF between its tokens) goes out as several data lines too:
		// a line break inside one would end the client's data line there.
		s.out = appendDataLines(s.out, data)
	}
	s.out = append(s.out, "\n\n"...)
	return s.write(s.out)
}

// appendDataLines appends data as SSE data lines, breaking it where it
// holds CRLF, CR or LF (the client joins them back with LF).
func appendDataLines(dst, data []byte) []byte {
	for {
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			return append(dst, data...)
		}
		dst = append(dst, data[:i]...)
		dst = append(dst, "\ndata: "...)
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
}

// built is an edited event, in a buffer reused from event to event (it is
// written before the next event is read).
func (s *Stream) built(ed *jsonb.Editor) []byte {
	s.eb.Reset()
	_, _ = ed.Body().WriteTo(&s.eb)
	return s.eb.Bytes()
}

func (s *Stream) write(b []byte) error {
	n, err := s.w.Write(b)
	s.Bytes += int64(n)
	if err != nil {
		return &ClientError{Err: err}
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return &ClientError{Err: err}
	}
	return nil
}
