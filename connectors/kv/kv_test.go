package kv

import (
	"encoding/json"
	"errors"
	"testing"
)

// ACCEPTANCE 160
func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		err        bool
	}{
		{"", SharedStorage, false},
		{"kv-shared-storage", SharedStorage, false},
		{"kv-nixl", NIXL, false},
		{"kv-sglang", SGLang, false},
		{"mooncake", "", true},
		{"offloading", "", true},
		{"KV-NIXL", "", true},
	} {
		c, err := Lookup(tc.name)
		if tc.err {
			if err == nil {
				t.Errorf("Lookup(%q): want error", tc.name)
			}
			continue
		}
		if err != nil || c.Name() != tc.want {
			t.Errorf("Lookup(%q) = %v, %v; want %s", tc.name, c, err, tc.want)
		}
	}
}

// ACCEPTANCE 165
func TestSharedStorage(t *testing.T) {
	c, _ := Lookup(SharedStorage)
	if got := string(c.PrefillParams()); got != `{"do_remote_decode":true,"do_remote_prefill":false}` {
		t.Fatalf("prefill params %s", got)
	}
	for _, reply := range []string{"", "null", `"x"`, `[1]`, `{"remote_host":"h"}`, `{bad`} {
		got, err := c.Decode(json.RawMessage(reply))
		if err != nil || string(got) != `{"do_remote_decode":false,"do_remote_prefill":true}` {
			t.Errorf("Decode(%s) = %s, %v", reply, got, err)
		}
	}
}

// ACCEPTANCE 166, 167, 151
func TestNIXL(t *testing.T) {
	c, _ := Lookup(NIXL)
	want := `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`
	if got := string(c.PrefillParams()); got != want {
		t.Fatalf("prefill params %s", got)
	}
	for _, tc := range []struct {
		reply, want string
		err         bool
	}{
		{reply: `{"do_remote_prefill":false,"do_remote_decode":true,"remote_engine_id":"e-1","remote_block_ids":[[1,2]],"remote_request_id":"rr-1","remote_host":"10.0.0.42","remote_port":5600,"tp_size":1}`,
			want: `{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":"e-1","remote_block_ids":[[1,2]],"remote_request_id":"rr-1","remote_host":"10.0.0.42","remote_port":5600,"tp_size":1}`},
		{reply: `{"block_id": 12345678901234567890, "peer_host" : "h\u00e9"}`,
			want: `{"block_id":12345678901234567890,"peer_host":"h\u00e9","do_remote_decode":false,"do_remote_prefill":true}`},
		{reply: `{"x":1.0e3}`, want: `{"x":1.0e3,"do_remote_decode":false,"do_remote_prefill":true}`},
		{reply: ``, err: true},
		{reply: `null`, err: true},
		{reply: `{}`, err: true},
		{reply: ` { } `, err: true},
		{reply: `"s"`, err: true},
		{reply: `[1,2]`, err: true},
		{reply: `{"a":`, err: true},
	} {
		got, err := c.Decode(json.RawMessage(tc.reply))
		if tc.err {
			if !errors.Is(err, ErrHandoff) {
				t.Errorf("Decode(%s): err %v, want ErrHandoff", tc.reply, err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("Decode(%s)\n got %s, %v\nwant %s", tc.reply, got, err, tc.want)
		}
	}
}

// ACCEPTANCE 168: kv-sglang carries no kv_transfer_params on either leg.
func TestSGLang(t *testing.T) {
	c, _ := Lookup(SGLang)
	if c.PrefillParams() != nil || !c.Bootstrap() {
		t.Fatal("sglang must send no kv_transfer_params and use bootstrap fields")
	}
	if p, err := c.Decode(json.RawMessage(`{"a":1}`)); p != nil || err != nil {
		t.Fatalf("Decode = %s, %v", p, err)
	}
}

// ACCEPTANCE 175
func TestParseBootstrapPort(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  bool
	}{
		{"", 8998, false}, {"9100", 9100, false}, {"65535", 65535, false}, {"1", 1, false},
		{"abc", 0, true}, {"9100x", 0, true}, {"0", 0, true}, {"-1", 0, true},
		{"65536", 0, true}, {"+80", 0, true}, {" 80", 0, true}, {"99999999999999999999", 0, true},
	} {
		got, err := ParseBootstrapPort(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseBootstrapPort(%q) = %d, %v", tc.in, got, err)
		}
	}
	t.Setenv(BootstrapPortEnv, "9100")
	if p, err := BootstrapPort(); p != 9100 || err != nil {
		t.Errorf("BootstrapPort from env = %d, %v", p, err)
	}
}
