package front

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

type stringerStruct struct{ A, b int }

func (stringerStruct) String() string { return "never printed by encoding/json" }

type namedString string

type textKey struct{ v string }

func (k textKey) MarshalText() ([]byte, error) { return []byte("<" + k.v + ">"), nil }

type failingMarshaler struct{}

func (failingMarshaler) MarshalJSON() ([]byte, error) { return nil, errors.New("no") }

type jsonError struct{}

func (jsonError) Error() string                { return "as error <&>" }
func (jsonError) MarshalJSON() ([]byte, error) { return []byte(`"as json"`), nil }

// The hand-written formatter prints every entry byte-for-byte as
// logrus.JSONFormatter does, errors included (same error text, no line).
func TestJSONFormatterMatchesLogrus(t *testing.T) {
	when := time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 5*3600+1800))
	many := logrus.Fields{}
	for i := range 40 { // more keys than sort without allocating
		many["k"+strconv.Itoa(39-i)] = i
	}
	cases := []struct {
		name   string
		fields logrus.Fields
		msg    string
		level  logrus.Level
		layout string
		caller bool
		funcs  bool // add a func field through WithField (logrus_error)
	}{
		{name: "empty", msg: "", level: logrus.InfoLevel},
		{name: "summary line", level: logrus.InfoLevel, layout: time.RFC3339Nano, msg: "request", fields: logrus.Fields{
			"request_id": "bench-1", "method": "POST", "path": "/v1/chat/completions", "status": 200,
			"duration_ms": 81.234, "bytes": int64(1432), "route": "chat", "workflow": "epd",
			"nodes": "render=succeeded:5ms/200 decode=succeeded:1.5µs/200", "rejected_request_id_len": 300}},
		{name: "strings", level: logrus.WarnLevel, msg: "a\"b\\c\n\r\t\b\f\x00\x01\x1f\x7f <tag> & é 日本 \u2028\u2029 \U0001F600",
			fields: logrus.Fields{"ctl": "\x00\x08\x0b\x0c\x0e\x1f", "html": "<script>&amp;</script>",
				"bad utf8": "a\xffb\xc3\x28c\xed\xa0\x80d\xf0\x9f\x98", "replacement": "\ufffd", "seps": "x\u2028y\u2029z",
				"key \"quoted\" <k>": "v", "ключ": "значение", "": "empty key"}},
		{name: "numbers", level: logrus.ErrorLevel, msg: "n", fields: logrus.Fields{
			"i": -42, "i8": int8(-8), "i16": int16(1600), "i32": int32(-32), "i64": int64(math.MinInt64),
			"u": uint(7), "u8": uint8(255), "u16": uint16(65535), "u32": uint32(1 << 31), "u64": uint64(math.MaxUint64),
			"uptr": uintptr(9), "f0": 0.0, "fneg0": math.Copysign(0, -1), "f1": 1.0, "fsmall": 1e-7, "fedge": 1e-6,
			"fbig": 1e21, "fbelow": 999999999999999999999.0, "fneg": -123.456, "fmax": math.MaxFloat64,
			"ftiny": 5e-324, "f32": float32(0.1), "f32small": float32(1e-7), "f32big": float32(1e21), "f32x": float32(3.4e38),
			"dur": 1500 * time.Millisecond, "ms": float64(81234) / 1000}},
		{name: "other types", level: logrus.DebugLevel, msg: "t", fields: logrus.Fields{
			"nil": nil, "true": true, "false": false, "err": errors.New("boom <x>\n"), "jsonerr": jsonError{},
			"stringer": stringerStruct{A: 1, b: 2}, "named": namedString("n<"), "bytes": []byte("hi\x00"),
			"slice": []any{1, "a", nil, 2.5}, "map": map[string]int{"b": 2, "a": 1}, "textkeys": map[textKey]int{{"z"}: 1, {"a"}: 2},
			"time": when, "header": http.Header{"X-A": {"1", "<2>"}}, "raw": json.RawMessage(`{"z": 1, "a":[ 1 ]}`),
			"number": json.Number("12.50"), "ptr": &stringerStruct{A: 3}, "nilptr": (*stringerStruct)(nil),
			"dur0": time.Duration(0)}},
		{name: "clash msg", level: logrus.InfoLevel, msg: "m", fields: logrus.Fields{"msg": 1, "a": 2}},
		{name: "clash time", level: logrus.InfoLevel, msg: "m", fields: logrus.Fields{"time": "t"}},
		{name: "clash logrus_error", level: logrus.InfoLevel, msg: "m", fields: logrus.Fields{"logrus_error": "e"}},
		{name: "func field", level: logrus.InfoLevel, msg: "m", fields: logrus.Fields{"a": 1}, funcs: true},
		{name: "caller", level: logrus.InfoLevel, msg: "m", fields: logrus.Fields{"func": "f", "file": "g"}, caller: true},
		{name: "nan", level: logrus.InfoLevel, msg: "m", fields: logrus.Fields{"x": math.NaN()}},
		{name: "inf32", level: logrus.InfoLevel, msg: "m", fields: logrus.Fields{"x": float32(math.Inf(-1))}},
		{name: "unsupported", level: logrus.InfoLevel, msg: "m", fields: logrus.Fields{"ch": make(chan int)}},
		{name: "marshaler fails", level: logrus.InfoLevel, msg: "m", fields: logrus.Fields{"m": failingMarshaler{}}},
		{name: "many keys", level: logrus.TraceLevel, msg: "many", fields: many},
		{name: "odd layout", level: logrus.PanicLevel, msg: "m", layout: `"<2006>"\ Jan _2 MST`},
		{name: "default layout", level: logrus.FatalLevel, msg: "m"},
		{name: "unknown level", level: logrus.Level(99), msg: "m"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			entry := func(buf *bytes.Buffer) *logrus.Entry {
				e := logrus.NewEntry(logrus.New()).WithFields(tc.fields)
				if tc.funcs {
					e = e.WithField("fn", func() {}).WithField("fnptr", new(func()))
				}
				e.Time, e.Level, e.Message, e.Buffer = when, tc.level, tc.msg, buf
				if tc.caller {
					e.Caller = &runtime.Frame{Function: "pkg.F", File: "f.go", Line: 7}
				}
				return e
			}
			want, wantErr := (&logrus.JSONFormatter{TimestampFormat: tc.layout}).Format(entry(nil))
			var pooled bytes.Buffer
			pooled.WriteString("stale") // logrus resets the pooled buffer; a reset one must not matter
			pooled.Reset()
			got, gotErr := (&JSONFormatter{TimestampFormat: tc.layout}).Format(entry(&pooled))
			if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
				t.Fatalf("error: got %v, want %v", gotErr, wantErr)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("output differs\n got: %s\nwant: %s", got, want)
			}
			if wantErr == nil && !json.Valid(got) {
				t.Fatalf("not JSON: %s", got)
			}
		})
	}
}

// Through a logger, lines are written as logrus would write them.
func TestJSONFormatterThroughLogger(t *testing.T) {
	var got, want bytes.Buffer
	for _, c := range []struct {
		out *bytes.Buffer
		f   logrus.Formatter
	}{{&got, &JSONFormatter{TimestampFormat: time.RFC3339Nano}}, {&want, &logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano}}} {
		l := logrus.New()
		l.SetOutput(c.out)
		l.SetFormatter(c.f)
		when := time.Unix(1700000000, 5).UTC()
		for i := range 3 {
			l.WithTime(when).WithFields(logrus.Fields{"i": i, "s": "x<y"}).Warn("line ", i)
		}
	}
	if got.String() != want.String() || bytes.Count(got.Bytes(), []byte("\n")) != 3 {
		t.Fatalf("got %q\nwant %q", got.String(), want.String())
	}
}

// The summary line's shape costs no allocation once the pooled buffer has grown.
func TestJSONFormatterNoAllocs(t *testing.T) {
	e := summaryEntry()
	var buf bytes.Buffer
	f := &JSONFormatter{TimestampFormat: time.RFC3339Nano}
	allocs := testing.AllocsPerRun(100, func() {
		buf.Reset()
		e.Buffer = &buf
		if _, err := f.Format(e); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per line", allocs)
	}
}

func summaryEntry() *logrus.Entry {
	e := logrus.NewEntry(logrus.New()).WithFields(logrus.Fields{
		"request_id": "bench-1", "method": "POST", "path": "/v1/chat/completions", "status": 200,
		"duration_ms": 0.042, "bytes": int64(2), "route": "chat", "workflow": "bench",
		"nodes": "decode=succeeded:12µs/200"})
	e.Time, e.Level, e.Message = time.Now(), logrus.InfoLevel, "request"
	return e
}

// The two formatters on the summary line's shape.
func BenchmarkJSONFormatter(b *testing.B) {
	for _, bc := range []struct {
		name string
		f    logrus.Formatter
	}{{"logrus", &logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano}}, {"celflow", &JSONFormatter{TimestampFormat: time.RFC3339Nano}}} {
		b.Run(bc.name, func(b *testing.B) {
			e := summaryEntry()
			var buf bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				e.Buffer = &buf
				out, _ := bc.f.Format(e)
				_, _ = io.Discard.Write(out)
			}
		})
	}
}
