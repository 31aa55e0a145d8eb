package upstream

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// PROTOCOL 12 (changed this round): a 4xx keeps the error's string param,
// in OpenAI's nested and vLLM's flat shapes, wherever it sits in the object.
func TestOpenAIErrorParam(t *testing.T) {
	long := strings.Repeat("p", 300)
	for _, tc := range []struct{ name, body, msg, param string }{
		{"nested after message", `{"error":{"message":"too long","type":"BadRequestError","param":"messages","code":400}}`, "too long", "messages"},
		{"nested before message", `{"error":{"param":"messages","message":"too long"}}`, "too long", "messages"},
		{"flat vllm", `{"object":"error","message":"too long","type":"BadRequestError","param":"messages","code":400}`, "too long", "messages"},
		{"flat param first", `{"param":"prompt","object":"error","message":"m"}`, "m", "prompt"},
		{"null param", `{"error":{"message":"m","param":null}}`, "m", ""},
		{"number param", `{"object":"error","message":"m","param":3}`, "m", ""},
		{"object param", `{"error":{"message":"m","param":{"a":"b"}}}`, "m", ""},
		{"flat without object", `{"message":"m","param":"messages"}`, "", ""},
		{"nested without message", `{"error":{"param":"messages"}}`, "", ""},
		{"nested empty message", `{"error":{"message":"","param":"model"}}`, "", ""},
		{"nested empty message cut", `{"error":{"message":"","param":"0`, "", ""},
		{"nested param before empty message", `{"error":{"param":"model","message":""}}`, "", ""},
		{"long param cut", `{"error":{"message":"m","param":"` + long + `"}}`, "m", long[:ErrorParamLimit]},
		{"escaped param", `{"error":{"message":"m","param":"mess\u0061ges"}}`, "m", "messages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, param := openAIError([]byte(tc.body), ErrorMsgLimit)
			if msg != tc.msg || param != tc.param {
				t.Fatalf("got %q %q, want %q %q", msg, param, tc.msg, tc.param)
			}
		})
	}
}

func TestReadError(t *testing.T) {
	h := http.Header{"Retry-After": {"5"}}
	er := ReadError(fakeResp([]byte(`{"error":{"message":"busy","param":"model"}}`), h))
	if er.Msg != "busy" || er.Param != "model" || er.RetryAfter != 5 || len(er.Body) == 0 {
		t.Fatalf("%+v", er)
	}
}

// A worker's Retry-After is untrusted: delta-seconds within MaxRetryAfter,
// or an HTTP-date in the next MaxRetryAfter seconds; anything else is 0
// (the caller's default).
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	for _, tc := range []struct {
		name string
		vals []string
		want int
	}{
		{"absent", nil, 0},
		{"seconds", []string{"7"}, 7},
		{"zero", []string{"0"}, 0},
		{"spaces", []string{"  12 "}, 12},
		{"bound", []string{"300"}, 300},
		{"over the bound", []string{"301"}, 0},
		{"huge", []string{"99999999999999999999"}, 0},
		{"negative", []string{"-1"}, 0},
		{"fraction", []string{"1.5"}, 0},
		{"plus", []string{"+3"}, 0},
		{"junk", []string{"soon"}, 0},
		{"two values", []string{"1", "2"}, 0},
		{"date", []string{date(90 * time.Second)}, 90},
		{"date past", []string{date(-time.Minute)}, 0},
		{"date far", []string{date(time.Hour)}, 0},
		{"date rfc850", []string{now.Add(30 * time.Second).Format(time.RFC850)}, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RetryAfter(http.Header{"Retry-After": tc.vals}, now); got != tc.want {
				t.Fatalf("%q: got %d, want %d", tc.vals, got, tc.want)
			}
		})
	}
}

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"1", "300", "Tue, 01 Dec 2026 12:01:00 GMT", "-1", "", "1e3"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		if n := RetryAfter(http.Header{"Retry-After": {s}}, now); n < 0 || n > MaxRetryAfter {
			t.Fatalf("%q gave %d", s, n)
		}
	})
}

func FuzzOpenAIError(f *testing.F) {
	for _, s := range []string{`{"error":{"message":"m","param":"p"}}`, `{"object":"error","message":"m","param":"p"}`, `{"error":{"param":"\ud800`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		msg, param := openAIError(b, ErrorMsgLimit)
		if len(msg) > ErrorMsgLimit || len(param) > ErrorParamLimit || !utf8.ValidString(msg) || !utf8.ValidString(param) {
			t.Fatalf("msg %d bytes, param %d bytes", len(msg), len(param))
		}
		if msg == "" && param != "" {
			t.Fatalf("a param without a message: %q", param)
		}
	})
}
