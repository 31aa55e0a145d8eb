package front

import "strconv"

// The framing tracker behind framedConn (framing.go): HTTP/1.x request
// boundaries in a byte stream, judged block by block as net/http would.

// framing states.
const (
	fsHeader    = iota // reading a header block's lines
	fsBody             // a Content-Length body: remain bytes left
	fsChunkSize        // a chunk-size line
	fsChunkData        // chunk data: remain bytes left, then its CRLF line
	fsChunkEnd         // the CRLF after chunk data
	fsTrailer          // trailer lines until the empty one
	fsDead             // not tracking any more
)

// framing follows HTTP/1.x request boundaries in a byte stream. It is not a
// validating parser: whatever net/http refuses ends the connection anyway,
// so on anything unexpected it stops (fsDead) rather than guess.
type framing struct {
	maxLine int
	state   int
	line    []byte // the current line, without its '\n'
	remain  int64

	// The header block being read.
	lines   int  // lines of the block so far, the request line included
	http10  bool // the request line says HTTP/1.0
	cl      []byte
	clCount int
	clDiff  bool
	te      []byte
	teCount int
	folded  bool

	reqID []byte // the block's x-request-id (cut at MaxRequestIDLen+1)
	// lastID is the x-request-id of the block just finished, until the
	// next one starts: net/http's own refusal of a whole block (no Host)
	// comes after the tracker saw its end (plainreply.go).
	lastID []byte

	blocks int    // header blocks completed
	bad    string // why request badAt is ambiguous (net/http would serve it)
	badAt  int    // its ordinal (1-based)
	reject string // why the last block is ambiguous in a way net/http refuses itself
}

func (f *framing) feed(p []byte) {
	for len(p) > 0 && f.state != fsDead {
		switch f.state {
		case fsBody, fsChunkData:
			k := int64(len(p))
			if k > f.remain {
				k = f.remain
			}
			f.remain -= k
			p = p[k:]
			if f.remain == 0 {
				if f.state == fsBody {
					f.state = fsHeader
				} else {
					f.state = fsChunkEnd
				}
			}
			continue
		}
		i := 0
		for i < len(p) && p[i] != '\n' {
			i++
		}
		if len(f.line)+i > f.maxLine {
			f.state = fsDead
			return
		}
		f.line = append(f.line, p[:i]...)
		if i == len(p) {
			return // the line continues in a later read
		}
		p = p[i+1:]
		line := f.line
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		f.onLine(line)
		f.line = f.line[:0]
	}
}

// onLine handles one complete line in a line-oriented state.
func (f *framing) onLine(line []byte) {
	switch f.state {
	case fsHeader:
		f.headerLine(line)
	case fsChunkSize:
		n, ok := chunkSize(line)
		switch {
		case !ok:
			f.state = fsDead
		case n == 0:
			f.state = fsTrailer
		default:
			f.state, f.remain = fsChunkData, n
		}
	case fsChunkEnd:
		if len(line) != 0 {
			f.state = fsDead
			return
		}
		f.state = fsChunkSize
	case fsTrailer:
		if len(line) == 0 {
			f.state = fsHeader
		}
	}
}

func (f *framing) headerLine(line []byte) {
	if f.lines == 0 {
		f.lastID = f.lastID[:0]
		if !requestLine(line) {
			// Not HTTP/1.x text (TLS records, if a server ever wraps this
			// connection in TLS itself, or garbage net/http refuses): stop,
			// rather than read framing into bytes that have none.
			f.state = fsDead
			return
		}
		f.lines = 1
		f.http10 = string(line[len(line)-8:]) == "HTTP/1.0"
		return
	}
	if len(line) > 0 {
		f.lines++
		if line[0] == ' ' || line[0] == '\t' {
			f.folded = true
			return
		}
		name, val, ok := cutColon(line)
		if !ok {
			return
		}
		switch {
		case equalFold(name, "content-length"):
			v := trimOWS(val)
			if f.clCount > 0 && string(v) != string(f.cl) {
				f.clDiff = true
			}
			f.cl = append(f.cl[:0], v...)
			f.clCount++
		case equalFold(name, "transfer-encoding"):
			f.te = append(f.te[:0], trimOWS(val)...)
			f.teCount++
		case equalFold(name, "x-request-id") && len(f.reqID) == 0:
			v := trimOWS(val)
			f.reqID = append(f.reqID[:0], v[:min(len(v), MaxRequestIDLen+1)]...)
		}
		return
	}
	f.endBlock()
}

// endBlock decides a finished header block's framing and the next state,
// following net/http's order (transfer.go): Transfer-Encoding first (only on
// HTTP/1.1), then the Content-Length values.
func (f *framing) endBlock() {
	f.blocks++
	var bad, reject string
	var n int64
	clOK := true
	if f.clCount > 0 {
		var err error
		n, err = strconv.ParseInt(string(f.cl), 10, 64)
		clOK = err == nil && n >= 0 && f.cl[0] != '+'
	}
	switch {
	case f.folded:
		// net/http joins folded lines: what it reads as the framing
		// headers is not what a proxy may read.
		bad = "a header line is folded (obs-fold)"
	case !f.http10 && (f.teCount > 1 || f.teCount == 1 && !equalFold(f.te, "chunked")):
		reject = "Transfer-Encoding other than exactly chunked"
	case f.clDiff:
		reject = "Content-Length values differ"
	case !clOK:
		reject = "Content-Length is not a number"
	case f.teCount > 0 && f.http10:
		bad = "Transfer-Encoding on an HTTP/1.0 request"
	case f.teCount > 0 && f.clCount > 0:
		bad = "both Content-Length and Transfer-Encoding are present"
	}
	te := f.teCount
	f.lastID = append(f.lastID[:0], f.reqID...)
	f.lines, f.http10, f.cl, f.clCount, f.clDiff, f.te, f.teCount, f.folded, f.reqID =
		0, false, f.cl[:0], 0, false, f.te[:0], 0, false, f.reqID[:0]
	switch {
	case reject != "":
		f.reject, f.state = reject, fsDead
	case bad != "":
		f.bad, f.badAt, f.state = bad, f.blocks, fsDead
	case te > 0:
		f.state = fsChunkSize
	case n > 0:
		f.state, f.remain = fsBody, n
	default:
		f.state = fsHeader
	}
}

// requestLine: the line ends in " HTTP/1.<digit>", as every request line
// net/http serves does (it accepts any HTTP/1 minor version and raw bytes in
// the target, so nothing else is required here).
func requestLine(line []byte) bool {
	n := len(line)
	return n >= 10 && string(line[n-9:n-1]) == " HTTP/1." && line[n-1] >= '0' && line[n-1] <= '9'
}

// chunkSize parses a chunk-size line: hex digits, then optional extensions.
func chunkSize(line []byte) (int64, bool) {
	var n int64
	i := 0
	for ; i < len(line); i++ {
		c := line[i]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			goto done
		}
		if n > (1<<62)>>4 {
			return 0, false
		}
		n = n<<4 | int64(d)
	}
done:
	if i == 0 {
		return 0, false
	}
	rest := trimOWS(line[i:])
	return n, len(rest) == 0 || rest[0] == ';'
}

func cutColon(line []byte) (name, val []byte, ok bool) {
	for i, c := range line {
		if c == ':' {
			return line[:i], line[i+1:], true
		}
	}
	return nil, nil, false
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// equalFold compares ASCII case-insensitively against a lower-case want.
func equalFold(b []byte, want string) bool {
	if len(b) != len(want) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}
