package async

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// LLMDConfig configures the llm-d-async back end (docs/async.md, The
// llm-d-async back end).
type LLMDConfig struct {
	Grace          time.Duration // a result's remaining life after its first fetch [60s]
	QuotaAttribute string        // metadata key carrying the tenant ["userid"]
	// HashPrefix is celflow's one key of its own, the body hash per
	// (tenant, id) for idempotency ["celflow:llmd:hash:"]; an AP ignores it.
	HashPrefix string
	// DB is the Redis database number, for keyspace notification channels.
	DB int
	// Now and Token are for tests (golden envelopes); nil: the clock and 16
	// random bytes in hex.
	Now   func() time.Time
	Token func() string
}

// LLMD writes requests in llm-d-async's format, so an unmodified
// llm-d-async processor drains them, and serves the results it pushes.
type LLMD struct {
	rdb redis.UniversalClient
	cfg LLMDConfig
}

// NewLLMD wraps a client.
func NewLLMD(rdb redis.UniversalClient, cfg LLMDConfig) *LLMD {
	if cfg.Grace <= 0 {
		cfg.Grace = 60 * time.Second
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
	return &LLMD{rdb: rdb, cfg: cfg}
}

// Keys of section 3.
func activeKey(member string) string  { return "request-active:" + member }
func cancelKey(member string) string  { return "request-cancel:" + member }
func mailboxKey(member string) string { return "results:req:" + member }

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
// test and for processors written in Go).
func (l *LLMD) BuildEnvelope(j *Job, token string) ([]byte, error) {
	member := j.Tenant + ":" + j.ID
	var e Envelope
	e.Internal.RequestToken, e.Internal.RequestQueueName, e.Internal.ResultQueueName = token, j.Queue, mailboxKey(member)
	e.RequestKind = "redis"
	e.Data = EnvelopeData{ID: member, Created: j.Created.Unix(), Deadline: j.Deadline.Unix(),
		Payload: json.RawMessage(j.Body), Metadata: map[string]string{l.cfg.QuotaAttribute: j.Tenant},
		Headers: map[string]string{}, Endpoint: j.Path, RequestQueueName: j.Queue, ResultQueueName: mailboxKey(member)}
	for k, v := range j.Headers {
		if strings.EqualFold(k, "traceparent") || strings.EqualFold(k, "tracestate") {
			e.Data.Metadata[strings.ToLower(k)] = v
		} else {
			e.Data.Headers[strings.ToLower(k)] = v
		}
	}
	return json.Marshal(&e)
}

// Submit implements Backend: the MULTI/EXEC of section 3 (DEL cancel, SET
// active marker with the token until the deadline, ZADD by deadline), after
// an idempotency check against the live marker, the mailbox and celflow's
// body hash.
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
	hashKey := l.cfg.HashPrefix + member
	ttl := j.Deadline.Sub(l.cfg.Now())
	if ttl <= 0 {
		ttl = time.Second
	}
	// SET NX on the hash decides who submits: a concurrent twin reattaches.
	ok, err := l.rdb.SetNX(ctx, hashKey, j.BodyHash, ttl+24*time.Hour).Result()
	if err != nil {
		return Submitted{}, err
	}
	if !ok {
		old, err := l.rdb.Get(ctx, hashKey).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return Submitted{}, err
		}
		live, err := l.rdb.Exists(ctx, activeKey(member), mailboxKey(member)).Result()
		if err != nil {
			return Submitted{}, err
		}
		if live > 0 {
			if old != j.BodyHash {
				return Submitted{Outcome: Conflict}, nil
			}
			return Submitted{Outcome: Reattached, State: StateQueued}, nil
		}
		// Expired or deleted: submit afresh under this body.
		if err := l.rdb.Set(ctx, hashKey, j.BodyHash, ttl+24*time.Hour).Err(); err != nil {
			return Submitted{}, err
		}
	}
	token := l.cfg.Token()
	env, err := l.BuildEnvelope(j, token)
	if err != nil {
		return Submitted{}, err
	}
	_, err = l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, cancelKey(member))
		p.Set(ctx, activeKey(member), token, ttl)
		p.ZAdd(ctx, j.Queue, redis.Z{Score: float64(j.Deadline.Unix()), Member: string(env)})
		return nil
	})
	if err != nil {
		return Submitted{}, err
	}
	return Submitted{Outcome: Created, State: StateQueued}, nil
}

// Fetch implements Backend: the mailbox without consuming it; if empty, the
// active marker (pending); if gone too, the mailbox once more (the AP may
// have written and cleared between the reads); else unknown.
func (l *LLMD) Fetch(ctx context.Context, tenant, id string) (Record, error) {
	if !validName(tenant) || !validName(id) {
		return Record{}, ErrBadName
	}
	member := tenant + ":" + id
	rec, found, err := l.readMailbox(ctx, member)
	if err != nil || found {
		return rec, err
	}
	n, err := l.rdb.Exists(ctx, activeKey(member)).Result()
	if err != nil {
		return Record{}, err
	}
	if n > 0 {
		return Record{State: StateQueued}, nil
	}
	rec, _, err = l.readMailbox(ctx, member)
	return rec, err
}

func (l *LLMD) readMailbox(ctx context.Context, member string) (Record, bool, error) {
	s, err := l.rdb.LIndex(ctx, mailboxKey(member), 0).Result()
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
	// The first fetch shortens the record's life to the grace.
	if ttl, err := l.rdb.PTTL(ctx, mailboxKey(member)).Result(); err == nil && (ttl < 0 || ttl > l.cfg.Grace) {
		l.rdb.PExpire(ctx, mailboxKey(member), l.cfg.Grace)
	}
	res := Result{Status: r.StatusCode, Body: []byte(r.Payload), Code: r.ErrorCode, Message: r.ErrorMessage}
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

// Cancel implements Backend: section 3's cancel; without keep the mailbox
// and celflow's hash are deleted too. A running request is the AP's to
// abort (it watches the cancel key).
func (l *LLMD) Cancel(ctx context.Context, tenant, id string, keep bool) error {
	if !validName(tenant) || !validName(id) {
		return ErrBadName
	}
	member := tenant + ":" + id
	if err := cancelLLMD.Run(ctx, l.rdb, []string{activeKey(member), cancelKey(member)}).Err(); err != nil {
		return err
	}
	if keep {
		return nil
	}
	return l.rdb.Del(ctx, mailboxKey(member), l.cfg.HashPrefix+member).Err()
}

// Watch implements Backend with a keyspace-notification subscription on the
// mailbox (needs notify-keyspace-events with K and l, or A); without them
// callers' polling fallback answers.
func (l *LLMD) Watch(tenant, id string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	ps := l.rdb.Subscribe(ctx, "__keyspace@"+strconv.Itoa(l.cfg.DB)+"__:"+mailboxKey(tenant+":"+id))
	go func() {
		defer ps.Close()
		select {
		case <-ps.Channel():
			close(ch)
		case <-ctx.Done():
		}
	}()
	return ch, cancel
}

// Close implements Backend (the client is the caller's).
func (l *LLMD) Close() error { return nil }

var _ Backend = (*LLMD)(nil)
