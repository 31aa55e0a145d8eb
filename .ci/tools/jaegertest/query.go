package jaegertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Trace is one trace as Jaeger's query API (/api/traces) returns it.
type Trace struct {
	TraceID   string             `json:"traceID"`
	Spans     []Span             `json:"spans"`
	Processes map[string]Process `json:"processes"`
}

// Span is one span of a Trace. StartTime and Duration are microseconds.
type Span struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []Reference `json:"references"`
	StartTime     int64       `json:"startTime"`
	Duration      int64       `json:"duration"`
	Tags          []Tag       `json:"tags"`
	ProcessID     string      `json:"processID"`
}

// Reference links a span to its parent (RefType "CHILD_OF").
type Reference struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// Tag is a span attribute; Value is a string, float64 or bool after JSON.
type Tag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// Process is the emitting service of spans.
type Process struct {
	ServiceName string `json:"serviceName"`
	Tags        []Tag  `json:"tags"`
}

// Parent returns the span's CHILD_OF parent span id, "" for a root.
func (s *Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Tag returns the value of the tag key and whether it is present.
func (s *Span) Tag(key string) (any, bool) {
	for _, t := range s.Tags {
		if t.Key == key {
			return t.Value, true
		}
	}
	return nil, false
}

// Find returns the first span named op, or nil.
func (t *Trace) Find(op string) *Span {
	for i := range t.Spans {
		if t.Spans[i].OperationName == op {
			return &t.Spans[i]
		}
	}
	return nil
}

// Service returns the service name of a span.
func (t *Trace) Service(s *Span) string { return t.Processes[s.ProcessID].ServiceName }

// ErrNotFound is Trace's error while Jaeger does not know the trace (yet).
var ErrNotFound = errors.New("trace not found")

type tracesReply struct {
	Data   []Trace `json:"data"`
	Errors []struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	} `json:"errors"`
}

func (j *Jaeger) get(ctx context.Context, path string) ([]Trace, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.QueryURL()+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, ErrNotFound
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	var r tracesReply
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if len(r.Errors) > 0 {
		return nil, fmt.Errorf("GET %s: %d %s", path, r.Errors[0].Code, r.Errors[0].Msg)
	}
	return r.Data, nil
}

// Trace fetches one trace by its 32-hex-digit id (GET /api/traces/<id>).
func (j *Jaeger) Trace(ctx context.Context, traceID string) (*Trace, error) {
	ts, err := j.get(ctx, "/api/traces/"+url.PathEscape(traceID))
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, ErrNotFound
	}
	return &ts[0], nil
}

// Traces lists recent traces of a service (GET /api/traces?service=...).
func (j *Jaeger) Traces(ctx context.Context, service string, limit int) ([]Trace, error) {
	q := url.Values{"service": {service}, "limit": {fmt.Sprint(limit)}}
	return j.get(ctx, "/api/traces?"+q.Encode())
}

// WaitTrace polls, at most for d, until the trace has at least minSpans
// spans: exporters batch, so spans arrive a little after a request ends.
func (j *Jaeger) WaitTrace(ctx context.Context, traceID string, minSpans int, d time.Duration) (*Trace, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last *Trace
	for {
		t, err := j.Trace(ctx, traceID)
		switch {
		case err == nil && len(t.Spans) >= minSpans:
			return t, nil
		case err == nil:
			last = t
		case !errors.Is(err, ErrNotFound) && ctx.Err() == nil:
			return nil, err
		}
		select {
		case <-ctx.Done():
			n := 0
			if last != nil {
				n = len(last.Spans)
			}
			return last, fmt.Errorf("trace %s: %d of %d spans after %s", traceID, n, minSpans, d)
		case <-tick.C:
		}
	}
}
