package upstream

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// Bounds on what celflow keeps of an upstream error for a client
// (docs/errors.md): the relayed param, and the longest Retry-After believed.
const (
	ErrorParamLimit = 128 // bytes of a relayed string param (a field name in practice)
	MaxRetryAfter   = 300 // seconds; a worker asking for more is not believed
)

// ErrorReply is what celflow keeps of a non-2xx answer.
type ErrorReply struct {
	Msg        string // the OpenAI-style message, ≤ ErrorMsgLimit bytes, "" when none
	Param      string // the error's string param, ≤ ErrorParamLimit bytes, "" when none
	RetryAfter int    // a valid Retry-After in seconds (see RetryAfter), 0 when none
	Body       []byte // at most ErrorBodyLimit bytes of the body, for the logs only
}

// ReadError reads a non-2xx response as ErrorInfo does (≤ 8 KiB, decoded,
// closed) and adds the error's string param and the Retry-After header.
func ReadError(resp *http.Response) ErrorReply {
	ra := RetryAfter(resp.Header, time.Now())
	msg, body := errorInfo(resp)
	var param string
	if msg != "" {
		_, param = openAIError(body, ErrorMsgLimit) // ≤ 8 KiB, error path only
	}
	// What reaches a client never names a place in the worker network (a
	// decode's failed KV pull names the prefill's host, port and KV path);
	// Body keeps the original for the log.
	return ErrorReply{Msg: ScrubAddresses(msg), Param: ScrubAddresses(param), RetryAfter: ra, Body: body}
}

// Redacted replaces each address ScrubAddresses removes.
const Redacted = "[address]"

// addrPattern matches, in this order: a URL (scheme://…, up to a space or a
// quote), a bracketed IPv6 address with an optional port, an IPv4 address
// with an optional port, a bare IPv6 address (two colons or more, hex
// groups), and host:port (a name, dotted or not, then a port of 2–5
// digits). A false positive costs a relayed message a detail, never more.
var addrPattern = regexp.MustCompile(`(?i)` +
	`\b[a-z][a-z0-9+.-]*://[^\s"'<>]*` +
	`|\[[0-9a-f:.%]+\](?::\d{1,5})?` +
	`|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b` +
	`|\b(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{1,4}\b|::(?:[0-9a-f]{1,4}:){0,6}[0-9a-f]{1,4}\b` +
	`|\b[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)*:\d{2,5}\b`)

// ScrubAddresses removes URLs, IP addresses and host:port pairs from an
// upstream message before it is relayed to a client (docs/errors.md,
// Upstream messages). Messages are short (≤ ErrorMsgLimit) and this runs on
// the error path only.
func ScrubAddresses(msg string) string {
	if msg == "" || !strings.ContainsAny(msg, ":.") {
		return msg
	}
	return addrPattern.ReplaceAllString(msg, Redacted)
}

// RetryAfter parses an upstream's Retry-After (RFC 9110 10.2.3), which is
// untrusted: exactly one value, either delta-seconds (digits only) or an
// HTTP-date turned into seconds from now (rounded up). It returns 0 for no
// header, a malformed one, a date in the past, or a wait over MaxRetryAfter
// seconds; the caller then applies its default.
func RetryAfter(h http.Header, now time.Time) int {
	vs := h.Values("Retry-After")
	if len(vs) != 1 {
		return 0
	}
	v := strings.TrimSpace(vs[0])
	if v == "" || len(v) > 64 {
		return 0
	}
	if v[0] >= '0' && v[0] <= '9' {
		if len(v) > 6 {
			return 0 // 1 000 000 s or more: out of bounds, and no overflow below
		}
		for i := 0; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return 0
			}
		}
		n, _ := strconv.Atoi(v)
		if n > MaxRetryAfter {
			return 0
		}
		return n
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	d := t.Sub(now)
	if d <= 0 || d > MaxRetryAfter*time.Second {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// openAIMessage is openAIError's message alone.
func openAIMessage(b []byte, max int) string {
	m, _ := openAIError(b, max)
	return m
}

// openAIError extracts the message and the string `param` of an
// OpenAI-style error body, the two shapes docs/errors.md names and no other:
// {"error":{"message":S,"param":P}} and vLLM's flat
// {"object":"error","message":S,"param":P}. A bare {"message":S} is not an
// OpenAI error and gives "" (only the listed shapes are relayed). A
// param that is not a string (null, a number) gives "".
//
// b may be a prefix of the body (cut at ErrorBodyLimit): the scan is
// lenient and a string cut by the end of b yields what was read. The
// message is valid UTF-8 of at most max bytes, cut on a rune boundary; the
// param at most ErrorParamLimit bytes.
func openAIError(b []byte, max int) (msg, param string) {
	s := &jscan{b: b}
	if !s.eat('{') {
		return "", ""
	}
	var flat, flatParam string
	var haveFlat, errObject bool
	for {
		key, ok := s.member()
		if !ok {
			break
		}
		switch {
		case key == "error" && s.peek() == '{':
			if m, p, found := s.nested(max); found {
				if m == "" { // a param is relayed only with its message
					p = ""
				}
				return m, p
			}
		case key == "message" && s.peek() == '"':
			flat, _ = s.str(max)
			haveFlat = true
		case key == "param" && s.peek() == '"':
			flatParam, _ = s.str(ErrorParamLimit)
		case key == "object" && s.peek() == '"':
			v, complete := s.str(8)
			errObject = complete && v == "error"
		default:
			s.skip() // on a cut value the eat below fails and ends the scan
		}
		if !s.eat(',') {
			break
		}
	}
	if errObject && haveFlat && flat != "" { // a param is relayed only with its message
		return flat, flatParam
	}
	return "", ""
}

// jscan is a minimal, lenient JSON reader over a possibly cut document.
type jscan struct {
	b []byte
	i int
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, 0 at the end.
func (s *jscan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *jscan) eat(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

// member reads `"key":` and leaves s at the value. Keys are compared only
// when complete and short.
func (s *jscan) member() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	k, complete := s.str(16)
	if !complete || !s.eat(':') {
		return "", false
	}
	s.ws()
	return k, true
}

// nested scans the object at s for a string "message" and a string
// "param", in any order; found reports a message.
func (s *jscan) nested(max int) (msg, param string, found bool) {
	s.eat('{')
	for {
		key, ok := s.member()
		if !ok {
			return msg, param, found
		}
		switch {
		case key == "message" && s.peek() == '"':
			msg, _ = s.str(max)
			found = true
		case key == "param" && s.peek() == '"':
			param, _ = s.str(ErrorParamLimit)
		default:
			if !s.skip() {
				return msg, param, found
			}
		}
		if !s.eat(',') {
			// End of the error object (or of b): let the caller go on.
			s.eat('}')
			return msg, param, found
		}
	}
}

// str decodes the string at s (which starts with '"'), keeping at most max
// bytes of its value but always consuming it whole. complete is false when
// b ended inside it.
func (s *jscan) str(max int) (v string, complete bool) {
	s.i++ // opening quote
	out := make([]byte, 0, min(max+8, 64))
	keep := func(p ...byte) {
		if len(out) <= max+4 { // a little over max, so the cut lands on a rune boundary
			out = append(out, p...)
		}
	}
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return finishStr(out, max), true
		case c != '\\':
			keep(c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			break
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case 'n':
			keep('\n')
		case 't':
			keep('\t')
		case 'r':
			keep('\r')
		case 'b':
			keep('\b')
		case 'f':
			keep('\f')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				s.i = len(s.b)
				break
			}
			if utf16.IsSurrogate(r) && s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
				save := s.i
				s.i += 2
				if r2, ok := s.hex4(); ok && utf16.DecodeRune(r, r2) != utf8.RuneError {
					r = utf16.DecodeRune(r, r2)
				} else {
					s.i = save
				}
			}
			var rb [utf8.UTFMax]byte
			keep(rb[:utf8.EncodeRune(rb[:], r)]...) // a lone surrogate becomes U+FFFD
		default: // \" \\ \/ and anything lenient
			keep(e)
		}
	}
	s.i = len(s.b)
	return finishStr(out, max), false
}

func (s *jscan) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	s.i += 4
	return r, true
}

// finishStr makes the value valid UTF-8 and cuts it to max bytes.
func finishStr(out []byte, max int) string {
	return cutUTF8(strings.ToValidUTF8(string(out), "\uFFFD"), max)
}

// skip consumes one value of any kind; false when b ended inside it.
func (s *jscan) skip() bool {
	switch s.peek() {
	case 0:
		return false
	case '"':
		_, complete := s.str(0)
		return complete
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, complete := s.str(0); !complete {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			s.i++
			if depth == 0 {
				return true
			}
		}
		return false
	}
	for s.i < len(s.b) { // number, true, false, null
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return true
		}
		s.i++
	}
	return false
}

// cutUTF8 cuts s to at most n bytes on a UTF-8 boundary (the engine's
// CutUTF8, which this package cannot import).
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
