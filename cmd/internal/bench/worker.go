package bench

import (
	"bytes"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Worker is the fixed-response worker that is the benchmark's floor: it
// reads each body whole and answers from canned bytes, so nearly all the
// CPU a cell spends is the load generator's and the hop's under test.
// It plays every role a text request needs (docs/protocol.md):
//
//   - Prefer: if-available → 412 (a conditional-decode miss);
//   - EPP-Profile: prefill (or encode) → a completion carrying
//     kv_transfer_params, as kv-nixl requires;
//   - Accept: text/event-stream (StreamLoad sends it; celflow forwards
//     Accept) → Chunks SSE events Gap apart, each stamped with
//     its send time ("t", unix ns), then [DONE]. The header, not the body's
//     "stream", decides: scanning a 200 KB body for it would put a cost on
//     the floor that no other cell has;
//   - otherwise → a small chat completion;
//   - POST …/render → token ids: a unique first token (so celflow's direct
//     prefix index never predicts a hit and the E/P/D run stays on the miss
//     path) then one token per 4 body bytes, at least 31.
type Worker struct {
	Chunks int
	Gap    time.Duration
	// Service, when set, is the time a plain decode reply takes, holding one
	// of Slots slots (0: unlimited) and waiting FIFO for a free one: a GPU
	// serving a batch of Slots requests. Throughput then stops growing at
	// concurrency Slots (the admission cell, overload.go). Use NewWorker.
	Service time.Duration
	Slots   int
	slots   chan struct{}

	seq     atomic.Int64
	renders sync.Map // body length → the rendered ids after the first one
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

var (
	decodeReply  = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"Hello."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}}`)
	prefillReply = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"H"},"finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":1,"total_tokens":13},` +
		`"kv_transfer_params":{"do_remote_prefill":true,"do_remote_decode":false,"remote_engine_id":"bench-engine","remote_block_ids":[[1,2,3]],"remote_request_id":"bench-rr","remote_host":"127.0.0.1","remote_port":5600,"tp_size":1}}`)
	missReply = []byte(`{"error":{"message":"prefix not cached (Prefer: if-available)","type":"precondition_failed","code":412}}`)
	chunkHead = []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}],"t":`)
	doneEvent = []byte("data: [DONE]\n\n")
)

func (w *Worker) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
		rw.WriteHeader(http.StatusOK)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(rw, "POST only", http.StatusMethodNotAllowed)
		return
	}
	buf := bufPool.Get().(*bytes.Buffer)
	defer bufPool.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(r.Body); err != nil {
		http.Error(rw, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	body := buf.Bytes()
	h := rw.Header()
	h["Content-Type"] = []string{"application/json"}
	switch {
	case r.URL.Path == "/v1/chat/completions/render":
		_, _ = rw.Write(w.render(len(body), false))
	case r.URL.Path == "/v1/completions/render":
		_, _ = rw.Write(w.render(len(body), true))
	case r.Header.Get("Prefer") == "if-available":
		rw.WriteHeader(http.StatusPreconditionFailed)
		_, _ = rw.Write(missReply)
	case r.Header.Get("Epp-Profile") == "prefill", r.Header.Get("Epp-Profile") == "encode":
		_, _ = rw.Write(prefillReply)
	case r.Header.Get("Accept") == "text/event-stream":
		w.stream(rw)
	default:
		w.serve()
		_, _ = rw.Write(decodeReply)
	}
}

// NewWorker builds a worker; slots > 0 bounds the decode replies served at
// once when service > 0.
func NewWorker(chunks int, gap, service time.Duration, slots int) *Worker {
	w := &Worker{Chunks: chunks, Gap: gap, Service: service, Slots: slots}
	if slots > 0 {
		w.slots = make(chan struct{}, slots)
	}
	return w
}

// serve spends the service time in a slot.
func (w *Worker) serve() {
	if w.Service <= 0 {
		return
	}
	if w.slots != nil {
		w.slots <- struct{}{}
		defer func() { <-w.slots }()
	}
	time.Sleep(w.Service)
}

// stream writes Chunks stamped events Gap apart, flushing each.
func (w *Worker) stream(rw http.ResponseWriter) {
	h := rw.Header()
	h["Content-Type"] = []string{"text/event-stream"}
	h["Cache-Control"] = []string{"no-cache"}
	rw.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(rw)
	_ = rc.Flush()
	ev := make([]byte, 0, len(chunkHead)+32)
	for i := 0; i < w.Chunks; i++ {
		if i > 0 && w.Gap > 0 {
			time.Sleep(w.Gap)
		}
		ev = append(ev[:0], chunkHead...)
		ev = strconv.AppendInt(ev, time.Now().UnixNano(), 10)
		ev = append(ev, "}\n\n"...)
		if _, err := rw.Write(ev); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
	_, _ = rw.Write(doneEvent)
	_ = rc.Flush()
}

// render answers a render call for a body of n bytes.
func (w *Worker) render(n int, completions bool) []byte {
	rest, ok := w.renders.Load(n)
	if !ok {
		count := max(31, n/4)
		b := make([]byte, 0, count*6)
		for i := range count {
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(1000+i%30000), 10)
		}
		rest, _ = w.renders.LoadOrStore(n, b)
	}
	tail := rest.([]byte)
	out := make([]byte, 0, len(tail)+48)
	if completions {
		out = append(out, '[')
	}
	out = append(out, `{"token_ids":[`...)
	out = strconv.AppendInt(out, 100_000+w.seq.Add(1), 10)
	out = append(out, tail...)
	out = append(out, "]}"...)
	if completions {
		out = append(out, ']')
	}
	return out
}

var _ http.Handler = (*Worker)(nil)
