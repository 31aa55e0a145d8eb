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

// Issue 17 item 6: what is relayed of a worker's error never names a place
// in the worker network; ordinary messages pass unchanged.
func TestScrubAddresses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"KV transfer failed: remote_request_id rr-1 from 10.0.3.7:8100: Get \"http://10.0.3.7:8100/sim/kv/rr-1\": dial tcp 10.0.3.7:8100: connect: connection refused",
			"KV transfer failed: remote_request_id rr-1 from [address]: Get \"[address]\": dial tcp [address]: connect: connection refused"},
		{"prefill-0.prefill.llm.svc.cluster.local:8000 is gone", "[address] is gone"},
		{"peer prefill-0:8000 closed", "peer [address] closed"},
		{"dial [fd00::12]:8100 failed", "dial [address] failed"},
		{"from fd00:1:2::12 and ::1", "from [address] and [address]"},
		{"https://user:pw@internal.example/v1?x=1 refused", "[address] refused"},
		{"192.168.1.20 unreachable", "[address] unreachable"},
		{"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
			"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."},
		{"max_tokens must be at least 1, got 0.", "max_tokens must be at least 1, got 0."},
		{"temperature 1.5 is out of range [0.0, 2.0]", "temperature 1.5 is out of range [0.0, 2.0]"},
		{"", ""},
	} {
		if got := ScrubAddresses(tc.in); got != tc.want {
			t.Errorf("ScrubAddresses(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
	er := ReadError(fakeResp([]byte(`{"object":"error","message":"KV pull from 10.0.3.7:8100 failed","param":"http://10.0.3.7/x"}`), nil))
	if er.Msg != "KV pull from [address] failed" || er.Param != "[address]" || !strings.Contains(string(er.Body), "10.0.3.7:8100") {
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
