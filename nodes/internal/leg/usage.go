package leg

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// The truth check of cache-aware routing (connectors/upstream, truth.go):
// a leg whose target carries a prediction (Target.Route) has the worker's
// usage.prompt_tokens_details.cached_tokens read from the reply the client
// gets, and compared with it once the reply was relayed whole. The reply
// is not copied or parsed: each chunk relayed is searched for the member
// name (the usage object comes last: the final SSE chunk of a stream with
// stream_options.include_usage, the end of a JSON body), and the last 64
// bytes of a chunk are kept so a name or number cut between two chunks is
// still found. A reply without usage (a stream the client did not ask
// usage for, a worker that does not report prompt_tokens_details), a
// compressed reply, or one that broke off is not counted. The tap also
// counts the reply in its endpoint's load while it is relayed
// (Target.StartRelay): a stream's legs are in flight only until its
// headers.

// routedKey holds, per run, the predicted targets of its nodes' legs by
// node and fan-out item. Only a leg with a prediction sets it, so a run
// without one pays a failed lookup on relay and nothing else.
var routedKey = engine.NewKey[*routed]("leg.routed")

type routed struct {
	mu sync.Mutex
	t  map[string]*upstream.Target
}

func routeScope(x *engine.Exec) string { return x.NodeID + "/" + strconv.Itoa(x.Index) }

// cacheKey is what names the run's prompt for the cache-aware picker: its
// token ids when known (generate, or after render), nothing otherwise; the
// model the leg's body names (the picker makes it the key's LoRA adapter
// when the pool lists it as one); and the prompt's media items by their
// hashes, the identifiers vLLM folds into the blocks' hashes (render's
// mm_hashes, which the decode leg also sets as each part's uuid). A prompt
// with an item render gave no hash scores on load alone: its blocks cannot
// be named.
func cacheKey(x *engine.Exec) upstream.CacheKey {
	if x == nil || x.Run == nil || !x.Run.State.Tokens.Known {
		return upstream.CacheKey{}
	}
	k := upstream.CacheKey{Tokens: x.Run.State.Tokens.IDs, Model: legModel(x)}
	if media := x.Run.State.Media; len(media) > 0 {
		items := make([]engine.MediaItem, len(media))
		copy(items, media)
		// The key names items in prompt order, which is placeholder order.
		sort.SliceStable(items, func(i, j int) bool { return items[i].Offset < items[j].Offset })
		k.MM, k.MMOffsets = make([]string, len(items)), make([]int, len(items))
		for i, it := range items {
			if it.Hash == "" {
				return upstream.CacheKey{}
			}
			k.MM[i], k.MMOffsets[i] = it.Hash, it.Offset
		}
	}
	return k
}

// legModel is the model the leg's body names: a target rule's, else the
// client's.
func legModel(x *engine.Exec) string {
	if m := Model(x); m != nil {
		var s string
		if json.Unmarshal(m, &s) == nil {
			return s
		}
		return ""
	}
	if x.Run.Req != nil {
		return x.Run.Req.Model
	}
	return ""
}

// noteRoute remembers t as the target of x's leg when it carries a
// prediction (a retry's pick replaces the earlier attempt's).
func noteRoute(x *engine.Exec, t *upstream.Target) {
	if t == nil || t.Route == nil || x == nil || x.Run == nil {
		return
	}
	r := routedKey.GetOrMake(x.Run, func() *routed { return &routed{t: map[string]*upstream.Target{}} })
	r.mu.Lock()
	r.t[routeScope(x)] = t
	r.mu.Unlock()
}

// tapUsage makes resp's body report the worker's cached_tokens to x's
// predicted target when the body has been read to its end. It returns the
// tap, nil when the leg carries no prediction.
func tapUsage(x *engine.Exec, resp *http.Response) *usageTap {
	if x == nil || x.Run == nil {
		return nil
	}
	r, ok := routedKey.Get(x.Run)
	if !ok {
		return nil
	}
	r.mu.Lock()
	t := r.t[routeScope(x)]
	r.mu.Unlock()
	if t == nil {
		return nil
	}
	// A compressed reply is counted as relaying but not searched.
	ce := resp.Header.Get("Content-Encoding")
	u := &usageTap{rc: resp.Body, t: t, end: t.StartRelay(), blind: ce != "" && ce != "identity"}
	resp.Body = u
	return u
}

// TapUsage is tapUsage for a relay that reads the reply itself (decode's
// failover relay): resp's body counts in its endpoint's load until it is
// closed, and reports cached_tokens when read to its end. A stream reader
// that stops at [DONE] without reading on to the end of the body calls
// the returned whole instead; a reply that broke off never calls it and is
// not counted. Only the leg the prediction was made for may be tapped: a
// failover's continuation has another prompt (the original followed by the
// generated tokens) on another endpoint, so its cached_tokens say nothing
// about the prediction.
func TapUsage(x *engine.Exec, resp *http.Response) (whole func()) {
	if u := tapUsage(x, resp); u != nil {
		return u.complete
	}
	return func() {}
}

// usageTap passes a body through and finds the last cached_tokens in it.
type usageTap struct {
	rc     io.ReadCloser
	t      *upstream.Target
	end    func() // ends the relay's count in the endpoint's load
	blind  bool   // compressed: not searched
	carry  [tapCarry]byte
	nc     int
	cached int
	found  bool
	done   bool
}

// tapCarry is kept from the end of each chunk: more than the member name,
// the colon and a number with any whitespace JSON writers put between.
const tapCarry = 64

// cachedName is searched for without its quotes: a pattern that starts
// with '"', the commonest byte of JSON, makes bytes.Index fall back to its
// brute-force search (8× slower on an SSE stream); the quotes are checked
// around a match.
var cachedName = []byte(`cached_tokens`)

func (u *usageTap) Read(p []byte) (int, error) {
	n, err := u.rc.Read(p)
	if n > 0 && !u.blind {
		u.scan(p[:n])
	}
	if err == io.EOF {
		u.complete()
	}
	return n, err
}

// complete reports the reply, once: it is whole.
func (u *usageTap) complete() {
	if u.done {
		return
	}
	u.done = true
	if u.end != nil {
		u.end()
	}
	if u.found {
		u.t.ObserveCached(u.cached)
	}
}

// Close ends the relay's count too: the relay closes the body however it
// ended.
func (u *usageTap) Close() error {
	if u.end != nil {
		u.end()
	}
	return u.rc.Close()
}

// scan looks for the member in b, and across the boundary with the
// previous chunk, then keeps b's last bytes.
func (u *usageTap) scan(b []byte) {
	if u.nc > 0 {
		var join [2 * tapCarry]byte
		j := append(join[:0], u.carry[:u.nc]...)
		j = append(j, b[:min(len(b), tapCarry)]...)
		u.find(j)
	}
	u.find(b)
	if len(b) >= tapCarry {
		u.nc = copy(u.carry[:], b[len(b)-tapCarry:])
		return
	}
	// A short chunk: keep the carry's tail and the chunk.
	keep := min(u.nc, tapCarry-len(b))
	copy(u.carry[:], u.carry[u.nc-keep:u.nc])
	u.nc = keep + copy(u.carry[keep:], b)
}

// find records every complete "cached_tokens": N in b (the last wins).
// Only a member counts: the name's opening quote follows '{' or ',' (and
// whitespace), so a name inside a string, such as a completion's
// top_logprobs key `x\"cached_tokens` (the token texts are the model's),
// is not taken for it; and only an integer counts (memberInt), so no
// float such as a logprob of a token named cached_tokens does either.
func (u *usageTap) find(b []byte) {
	at := 0
	for {
		i := bytes.Index(b[at:], cachedName)
		if i < 0 {
			return
		}
		i += at
		at = i + len(cachedName)
		if i == 0 || b[i-1] != '"' || !memberStart(b[:i-1]) {
			continue
		}
		rest := b[at:]
		if len(rest) == 0 || rest[0] != '"' {
			continue
		}
		if v, ok := memberInt(rest[1:]); ok {
			u.cached, u.found = v, true
		}
	}
}

// tapSpace bounds the whitespace taken before a member's name and around
// its colon, so that a whole member, from the '{' or ',' before it to the
// byte after its number, fits in tapCarry bytes: one cut between two
// chunks cannot hide it, and none is found in one way of cutting a body
// and missed in another.
const (
	tapSpaceBefore = 24
	tapSpaceColon  = 8
)

// memberStart: b (the bytes before a name's opening quote) ends in '{' or
// ',' and at most tapSpaceBefore bytes of whitespace. b running out first
// is false: the join with the previous chunk sees the whole member.
func memberStart(b []byte) bool {
	for k := len(b) - 1; k >= 0 && len(b)-1-k <= tapSpaceBefore; k-- {
		switch b[k] {
		case ' ', '\t', '\n', '\r':
			continue
		case '{', ',':
			return true
		}
		return false
	}
	return false
}

// memberInt reads `: N` at the start of b; ok is false when b ends before
// the number does (the rest is in the next chunk), when it is not a
// non-negative integer of at most 12 digits (a fraction or exponent
// follows it: a float is not a token count), or when there is more than
// tapSpaceColon bytes of whitespace around the colon.
func memberInt(b []byte) (int, bool) {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	if i >= len(b) || b[i] != ':' {
		return 0, false
	}
	i++
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	if i-1 > tapSpaceColon {
		return 0, false
	}
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == start || i == len(b) || i-start > 12 {
		return 0, false
	}
	switch b[i] {
	case '.', 'e', 'E':
		return 0, false
	}
	v, err := strconv.Atoi(string(b[start:i]))
	return v, err == nil
}
