package async

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// LLMDConfig configures the llm-d-async back end (docs/async.md, The
// llm-d-async back end).
type LLMDConfig struct {
	Grace time.Duration // a result's remaining life after its first fetch [60s]
	// ResultTTL is how long past its deadline celflow keeps its own key of
	// a request (its generation: body hash, token, deadline), so a GET can
	// tell a deadline that passed unanswered (504) from an unknown id
	// (410) [24h]; the AP's result_ttl_seconds should not be shorter.
	ResultTTL      time.Duration
	QuotaAttribute string // metadata key carrying the tenant ["userid"]
	// HashPrefix is celflow's one key of its own, the body hash per
	// (tenant, id) for idempotency ["celflow:llmd:hash:"]; an AP ignores it.
	HashPrefix string
	// DB is the Redis database number, for keyspace notification channels.
	DB int
	// Scrubbed, when set, is told the original error_message of a result
	// record whose relayed text had URLs or addresses removed (at its first
	// fetch): for the logs, never for clients.
	Scrubbed func(member, original string)
	// Now and Token are for tests (golden envelopes); nil: the clock and 16
	// random bytes in hex.
	Now   func() time.Time
	Token func() string
}

// LLMD writes requests in llm-d-async's format, so an unmodified
// llm-d-async processor drains them, and serves the results it pushes.
type LLMD struct {
	rdb     redis.UniversalClient
	cfg     LLMDConfig
	waiters *Waiters // one keyspace subscription for every waiter of this replica
}

// NewLLMD wraps a client.
func NewLLMD(rdb redis.UniversalClient, cfg LLMDConfig) *LLMD {
	if cfg.Grace <= 0 {
		cfg.Grace = 60 * time.Second
	}
	if cfg.ResultTTL <= 0 {
		cfg.ResultTTL = 24 * time.Hour
	}
	if cfg.QuotaAttribute == "" {
		cfg.QuotaAttribute = "userid"
	}
	if cfg.HashPrefix == "" {
		cfg.HashPrefix = "celflow:llmd:hash:"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Token == nil {
		cfg.Token = func() string {
			var b [16]byte
			_, _ = rand.Read(b[:])
			return hex.EncodeToString(b[:])
		}
	}
	// Every mailbox's keyspace channel, fanned out to the waiters by the
	// (tenant, id) the mailbox belongs to: whatever the number of waiters,
	// one pub/sub connection.
	prefix := "__keyspace@" + strconv.Itoa(cfg.DB) + "__:" + mailboxPrefix
	w := NewWaiters(rdb, WaitersConfig{Patterns: []string{prefix + "*"},
		Key: func(ch, _ string) string { return mailboxMember(strings.TrimPrefix(ch, prefix)) }})
	return &LLMD{rdb: rdb, cfg: cfg, waiters: w}
}

// mailboxMember is the "<tenant>:<id>" a mailbox name (after its prefix)
// belongs to: "<tenant>:<id>:<token>", or "<tenant>:<id>" before
// generations; "" for anything else.
func mailboxMember(rest string) string {
	i := strings.IndexByte(rest, ':')
	if i <= 0 {
		return ""
	}
	if j := strings.IndexByte(rest[i+1:], ':'); j >= 0 {
		rest = rest[:i+1+j]
	}
	if len(rest) == i+1 {
		return ""
	}
	return rest
}

// The AP's keys per request: its active marker and cancel key are named by
// the envelope id; the mailbox is whatever the envelope names, and celflow
// names one per generation (token), so a result of a deleted generation can
// never be read as the result of the request that reuses its id.
func activeKey(member string) string { return "request-active:" + member }
func cancelKey(member string) string { return "request-cancel:" + member }

// mailboxPrefix starts every mailbox name (the keyspace subscription
// pattern).
const mailboxPrefix = "results:req:"

// mailboxKey is the mailbox of member's generation token; "" is the one
// mailbox per member that celflow used before generations (still read for
// requests such a version queued).
func mailboxKey(member, token string) string {
	if token == "" {
		return mailboxPrefix + member
	}
	return mailboxPrefix + member + ":" + token
}

// deadlineSlack is how long past the deadline a missing result still reads
// as pending: the AP's worker cuts the call at the deadline and pushes its
// record a moment later.
const deadlineSlack = 2 * time.Second

// generation is celflow's own key of a request, "<body hash> <token>
// <deadline, Unix ms>" (a bare body hash: written before generations, token
// and deadline unknown).
type generation struct {
	hash, token string
	deadline    time.Time
}

func parseGeneration(v string) generation {
	f := strings.Fields(v)
	g := generation{}
	if len(f) > 0 {
		g.hash = f[0]
	}
	if len(f) == 3 {
		g.token = f[1]
		if ms, err := strconv.ParseInt(f[2], 10, 64); err == nil {
			g.deadline = time.UnixMilli(ms)
		}
	}
	return g
}

func (g generation) String() string {
	return g.hash + " " + g.token + " " + strconv.FormatInt(g.deadline.UnixMilli(), 10)
}

// Envelope is the queued message, field order as section 3 shows it.
type Envelope struct {
	Internal struct {
		RequestToken     string `json:"request_token"`
		RequestQueueName string `json:"request_queue_name"`
		ResultQueueName  string `json:"result_queue_name"`
	} `json:"internal"`
	RequestKind string       `json:"request_kind"`
	Data        EnvelopeData `json:"data"`
}

// EnvelopeData is the envelope's data object.
type EnvelopeData struct {
	ID               string            `json:"id"`
	Created          int64             `json:"created"`
	Deadline         int64             `json:"deadline"`
	Payload          json.RawMessage   `json:"payload"`
	Metadata         map[string]string `json:"metadata"`
	Headers          map[string]string `json:"headers"`
	Endpoint         string            `json:"endpoint"`
	RequestQueueName string            `json:"request_queue_name"`
	ResultQueueName  string            `json:"result_queue_name"`
}

// ResultRecord is what an AP pushes onto the mailbox.
type ResultRecord struct {
	ID           string `json:"id"`
	StatusCode   int    `json:"status_code"`
	Payload      string `json:"payload"`
	ErrorCode    string `json:"error_code,omitempty"`
	ErrorMessage string `json:"error_message,omitempty"`
	RequestToken string `json:"request_token,omitempty"`
}

// BuildEnvelope is the message for j with token (exported for the golden
// test and for processors written in Go). The client's request id rides in
// the headers as x-request-id, as the builtin dispatcher sends it, so
// worker logs carry it.
func (l *LLMD) BuildEnvelope(j *Job, token string) ([]byte, error) {
	member := j.Tenant + ":" + j.ID
	box := mailboxKey(member, token)
	var e Envelope
	e.Internal.RequestToken, e.Internal.RequestQueueName, e.Internal.ResultQueueName = token, j.Queue, box
	e.RequestKind = "redis"
	e.Data = EnvelopeData{ID: member, Created: j.Created.Unix(), Deadline: j.Deadline.Unix(),
		Payload: json.RawMessage(j.Body), Metadata: map[string]string{l.cfg.QuotaAttribute: j.Tenant},
		Headers: map[string]string{}, Endpoint: j.Path, RequestQueueName: j.Queue, ResultQueueName: box}
	for k, v := range j.Headers {
		if strings.EqualFold(k, "traceparent") || strings.EqualFold(k, "tracestate") {
			e.Data.Metadata[strings.ToLower(k)] = v
		} else {
			e.Data.Headers[strings.ToLower(k)] = v
		}
	}
	e.Data.Headers["x-request-id"] = j.ID
	return json.Marshal(&e)
}

// submitLLMD creates a generation, atomically: celflow's key (unless one
// exists: then its value is returned), the active marker with the token
// until the deadline, and the envelope scored by the deadline. The cancel
// key is left alone: it holds a deleted generation's token, which keeps
// that generation's envelope cancelled and cannot match the new token.
//
// KEYS gen active queue; ARGV gen-value gen-ttl-ms token active-ttl-ms
// deadline envelope.
var submitLLMD = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[6])
return ''
`)

// Submit implements Backend: a new generation (celflow's key, the active
// marker, the envelope: one script), or, while celflow's key of the
// (tenant, id) lives, a reattach (the same body) or a conflict.
func (l *LLMD) Submit(ctx context.Context, j *Job) (Submitted, error) {
	if !validName(j.Tenant) || !validName(j.ID) || !validName(j.Queue) {
		return Submitted{}, ErrBadName
	}
	if j.BodyHash == "" {
		j.BodyHash = Hash(j.Body)
	}
	if j.Created.IsZero() {
		j.Created = l.cfg.Now()
	}
	member := j.Tenant + ":" + j.ID
	ttl := j.Deadline.Sub(l.cfg.Now())
	if ttl <= 0 {
		ttl = time.Second
	}
	token := l.cfg.Token()
	env, err := l.BuildEnvelope(j, token)
	if err != nil {
		return Submitted{}, err
	}
	g := generation{hash: j.BodyHash, token: token, deadline: j.Deadline}
	old, err := submitLLMD.Run(ctx, l.rdb, []string{l.cfg.HashPrefix + member, activeKey(member), j.Queue},
		g.String(), (ttl + l.cfg.ResultTTL).Milliseconds(), token, ttl.Milliseconds(),
		j.Deadline.Unix(), env).Text()
	if err != nil {
		return Submitted{}, err
	}
	if old == "" {
		return Submitted{Outcome: Created, State: StateQueued}, nil
	}
	og := parseGeneration(old)
	if og.hash != j.BodyHash {
		return Submitted{Outcome: Conflict}, nil
	}
	st := StateQueued
	if n, err := l.rdb.Exists(ctx, mailboxKey(member, og.token)).Result(); err == nil && n > 0 {
		st = StateDone
	}
	return Submitted{Outcome: Reattached, State: st}, nil
}

// Fetch implements Backend, from celflow's key of the request's live
// generation (none: unknown, deleted or expired, 410): the generation's
// mailbox without consuming it (its oldest record: the first outcome is
// final); if empty, the active marker (pending); if gone too, the mailbox
// once more (the AP may have written and cleared between the reads); then
// past the deadline a DEADLINE_EXCEEDED record (an AP drops a request whose
// deadline passed in the queue without writing one), before it pending.
func (l *LLMD) Fetch(ctx context.Context, tenant, id string) (Record, error) {
	if !validName(tenant) || !validName(id) {
		return Record{}, ErrBadName
	}
	member := tenant + ":" + id
	genKey := l.cfg.HashPrefix + member
	v, err := l.rdb.Get(ctx, genKey).Result()
	if errors.Is(err, redis.Nil) {
		return Record{}, nil
	}
	if err != nil {
		return Record{}, err
	}
	g := parseGeneration(v)
	box := mailboxKey(member, g.token)
	rec, found, err := l.readMailbox(ctx, member, box, genKey)
	if err != nil || found {
		return rec, err
	}
	n, err := l.rdb.Exists(ctx, activeKey(member)).Result()
	if err != nil {
		return Record{}, err
	}
	if n > 0 {
		return Record{State: StateQueued, Deadline: g.deadline}, nil
	}
	if rec, found, err = l.readMailbox(ctx, member, box, genKey); err != nil || found {
		return rec, err
	}
	if g.deadline.IsZero() {
		return Record{}, nil // an old version's request: nothing to go by
	}
	if l.cfg.Now().Before(g.deadline.Add(deadlineSlack)) {
		return Record{State: StateQueued, Deadline: g.deadline}, nil
	}
	l.shorten(ctx, genKey)
	return Record{State: StateDone, Result: Result{Code: CodeDeadline, Message: "the request's deadline passed without a result"}}, nil
}

// shorten cuts key's remaining life to the grace (the first fetch).
func (l *LLMD) shorten(ctx context.Context, key string) bool {
	if ttl, err := l.rdb.PTTL(ctx, key).Result(); err == nil && (ttl < 0 || ttl > l.cfg.Grace) {
		l.rdb.PExpire(ctx, key, l.cfg.Grace)
		return true
	}
	return false
}

func (l *LLMD) readMailbox(ctx context.Context, member, box, genKey string) (Record, bool, error) {
	s, err := l.rdb.LIndex(ctx, box, -1).Result()
	if errors.Is(err, redis.Nil) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	var r ResultRecord
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return Record{State: StateDone, Result: Result{Code: CodeInference, Message: "unreadable result record"}}, true, nil
	}
	// The first fetch shortens the record's life, and the generation's, to
	// the grace.
	first := l.shorten(ctx, box)
	l.shorten(ctx, genKey)
	res := Result{Status: r.StatusCode, Body: []byte(r.Payload), Code: r.ErrorCode, Message: ScrubMessage(r.ErrorMessage)}
	if res.Message != r.ErrorMessage && first && l.cfg.Scrubbed != nil {
		l.cfg.Scrubbed(member, r.ErrorMessage)
	}
	if r.StatusCode == 0 && res.Code == "" {
		res.Code = CodeInference
	}
	return Record{State: StateDone, Result: res}, true, nil
}

// cancelLLMD sets the cancel key to the active marker's token, atomically.
var cancelLLMD = redis.NewScript(`
local tok = redis.call('GET', KEYS[1])
if not tok then return 0 end
redis.call('SET', KEYS[2], tok, 'EX', 604800)
return 1
`)

// cancelledLLMD stores a CANCELLED record in the generation's empty mailbox
// (the oldest record is the outcome: one the AP pushes later is not read).
//
// KEYS mailbox; ARGV record ttl-ms.
var cancelledLLMD = redis.NewScript(`
if redis.call('LLEN', KEYS[1]) > 0 then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// Cancel implements Backend: the AP's cancel (the cancel key set to the
// active marker's token; a running request is the AP's to abort, it
// watches the key). Without keep (DELETE) celflow's key and the mailbox go
// too, so the (tenant, id) reads 410 from then on, whatever the AP still
// pushes into that generation's mailbox, and a re-POST starts a new
// generation whose result is its own. With keep (a wait-mode client left)
// a CANCELLED record is stored at once and stays the outcome.
func (l *LLMD) Cancel(ctx context.Context, tenant, id string, keep bool) error {
	if !validName(tenant) || !validName(id) {
		return ErrBadName
	}
	member := tenant + ":" + id
	genKey := l.cfg.HashPrefix + member
	v, err := l.rdb.Get(ctx, genKey).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	g := parseGeneration(v)
	if err := cancelLLMD.Run(ctx, l.rdb, []string{activeKey(member), cancelKey(member)}).Err(); err != nil {
		return err
	}
	if keep {
		if v == "" {
			return nil
		}
		rec, _ := json.Marshal(ResultRecord{ID: member, ErrorCode: CodeCancelled, ErrorMessage: "cancelled: the waiting client left"})
		return cancelledLLMD.Run(ctx, l.rdb, []string{mailboxKey(member, g.token)}, rec, l.cfg.ResultTTL.Milliseconds()).Err()
	}
	if err := l.rdb.Del(ctx, genKey, mailboxKey(member, g.token), mailboxKey(member, "")).Err(); err != nil {
		return err
	}
	// This replica's waiters re-read now (a DEL is no list event); others'
	// at their next poll.
	l.waiters.Wake(member)
	return nil
}

// Watch implements Backend: a waiter on the replica's one keyspace
// subscription, woken by any change to the request's mailboxes (needs
// notify-keyspace-events with K and l, or A; without them callers' polling
// fallback answers).
func (l *LLMD) Watch(tenant, id string) (<-chan struct{}, func()) {
	return l.waiters.Watch(tenant + ":" + id)
}

// Close implements Backend: ends the keyspace subscription (the client is
// the caller's).
func (l *LLMD) Close() error {
	l.waiters.Close()
	return nil
}

var _ Backend = (*LLMD)(nil)

// Patterns ScrubMessage removes: URLs (any scheme), IPv6 literals (in
// brackets, or with "::" or seven colons), IPv4 addresses, and host:port (a host name with a letter: not a clock time).
var (
	scrubURL  = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://[^\s"'<>]*`)
	scrubIPv6 = regexp.MustCompile(`(?i)\[[0-9a-f:.%a-z]*:[0-9a-f:.%a-z]*\](:\d{1,5})?|\b(?:[0-9a-f]{1,4}:){7}[0-9a-f]{1,4}\b|(?:\b[0-9a-f]{1,4})?(?::[0-9a-f]{1,4})*::(?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*)?(?:%[0-9a-z]+)?`)
	scrubIPv4 = regexp.MustCompile(`\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?\b`)
	scrubHost = regexp.MustCompile(`(?i)\b[a-z0-9.-]*[a-z][a-z0-9.-]*:\d{1,5}\b`)
)

// ScrubMessage is an AP's error_message fit for a client: URLs, IP
// addresses and host:port pairs (the worker network's topology: Go's
// transport errors name the upstream URL and address) are replaced by
// "<redacted>". The original belongs in the logs (LLMDConfig.Scrubbed).
func ScrubMessage(s string) string {
	if s == "" {
		return s
	}
	for _, re := range []*regexp.Regexp{scrubURL, scrubIPv6, scrubIPv4, scrubHost} {
		s = re.ReplaceAllStringFunc(s, func(m string) string {
			if re == scrubIPv6 && !strings.Contains(m, "::") && strings.Count(m, ":") < 7 && !strings.HasPrefix(m, "[") {
				return m
			}
			return "<redacted>"
		})
	}
	return s
}
