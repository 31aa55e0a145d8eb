package sim

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FaultHeader carries per-request faults; its syntax is the --fault flag's.
// celflow forwards client headers to every leg, so one client header can aim
// a fault at one role ("prefill:status=503") of a whole E/P/D request.
const FaultHeader = "X-Sim-Fault"

// Fault is one injected misbehaviour. Zero fields do nothing.
type Fault struct {
	Role               Role          // "" applies to every role
	Status             int           // answer this status with an OpenAI error
	ResetBeforeHeaders bool          // reset the connection before any byte
	ResetMidStream     bool          // reset after the first body bytes
	SlowHeaders        time.Duration // wait this long before the status line
	StallBody          time.Duration // JSON replies: headers, then this silence before the body
	Trickle            time.Duration // JSON replies: headers, then the body one byte per interval
	ECKey              string        // encode: key every ec_transfer_params descriptor by this, not the item's hash
	KVDrop             bool          // prefill: answer kv_transfer_params but keep no KV (a prefill that died after answering)
	Delay              time.Duration // wait this long before any work
	TTFT, ITL          *time.Duration
	// CutAfter and ExitAfter kill a reply after that many answer tokens
	// (kill.go): CutAfter aborts the connection, ExitAfter the process.
	CutAfter, ExitAfter *int
	Times               int // flag faults only: fire this many times, 0 = always
	Every               int // flag faults only: fire on every Nth matching request, 0 = each
}

// ParseFaults parses "[role:]action[,action...][; ...]" where an action is
// status=N, reset-before-headers, reset-mid-stream, slow-headers=D, delay=D,
// stall-body=D, trickle=D, ec-key=K, kv-drop, ttft=D, itl=D, cut-after=K,
// exit-after=K, times=N or every=N.
func ParseFaults(spec string) ([]Fault, error) {
	var out []Fault
	for _, group := range strings.Split(spec, ";") {
		group = strings.TrimSpace(group)
		if group == "" {
			continue
		}
		var f Fault
		if i := strings.IndexByte(group, ':'); i >= 0 {
			f.Role = Role(strings.TrimSpace(group[:i]))
			if !f.Role.valid() {
				return nil, fmt.Errorf("fault %q: unknown role %q", group, f.Role)
			}
			group = group[i+1:]
		}
		for _, a := range strings.Split(group, ",") {
			if err := f.set(strings.TrimSpace(a)); err != nil {
				return nil, fmt.Errorf("fault %q: %v", group, err)
			}
		}
		out = append(out, f)
	}
	return out, nil
}

func (f *Fault) set(action string) error {
	name, val, hasVal := strings.Cut(action, "=")
	dur := func() (time.Duration, error) {
		d, err := time.ParseDuration(val)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("%s: want a duration like 2s, got %q", name, val)
		}
		return d, nil
	}
	var err error
	switch name {
	case "status":
		f.Status, err = strconv.Atoi(val)
		if err != nil || f.Status < 200 || f.Status > 599 {
			return fmt.Errorf("status: want 200-599, got %q", val)
		}
	case "times":
		f.Times, err = strconv.Atoi(val)
		if err != nil || f.Times < 1 {
			return fmt.Errorf("times: want a positive integer, got %q", val)
		}
	case "every":
		f.Every, err = strconv.Atoi(val)
		if err != nil || f.Every < 1 {
			return fmt.Errorf("every: want a positive integer, got %q", val)
		}
	case "reset-before-headers", "reset-mid-stream":
		if hasVal {
			return fmt.Errorf("%s takes no value", name)
		}
		f.ResetBeforeHeaders = f.ResetBeforeHeaders || name == "reset-before-headers"
		f.ResetMidStream = f.ResetMidStream || name == "reset-mid-stream"
	case "kv-drop":
		if hasVal {
			return fmt.Errorf("%s takes no value", name)
		}
		f.KVDrop = true
	case "slow-headers":
		f.SlowHeaders, err = dur()
	case "ec-key":
		if f.ECKey = val; val == "" || strings.ContainsAny(val, ",;") {
			return fmt.Errorf("ec-key: want a hash, got %q", val)
		}
	case "stall-body":
		f.StallBody, err = dur()
	case "trickle":
		if f.Trickle, err = dur(); err == nil && f.Trickle == 0 {
			err = fmt.Errorf("trickle: want a positive interval")
		}
	case "delay":
		f.Delay, err = dur()
	case "cut-after", "exit-after":
		k, perr := strconv.Atoi(val)
		if perr != nil || k < 0 {
			return fmt.Errorf("%s: want a token count (0 or more), got %q", name, val)
		}
		if name == "cut-after" {
			f.CutAfter = &k
		} else {
			f.ExitAfter = &k
		}
	case "ttft", "itl":
		var d time.Duration
		if d, err = dur(); err == nil {
			if name == "ttft" {
				f.TTFT = &d
			} else {
				f.ITL = &d
			}
		}
	default:
		return fmt.Errorf("unknown action %q", action)
	}
	return err
}

// merge overlays the set fields of o onto f.
func (f Fault) merge(o Fault) Fault {
	if o.Status != 0 {
		f.Status = o.Status
	}
	f.ResetBeforeHeaders = f.ResetBeforeHeaders || o.ResetBeforeHeaders
	f.ResetMidStream = f.ResetMidStream || o.ResetMidStream
	f.KVDrop = f.KVDrop || o.KVDrop
	f.SlowHeaders = max(f.SlowHeaders, o.SlowHeaders)
	f.StallBody = max(f.StallBody, o.StallBody)
	if o.ECKey != "" {
		f.ECKey = o.ECKey
	}
	f.Trickle = max(f.Trickle, o.Trickle)
	f.Delay = max(f.Delay, o.Delay)
	if o.TTFT != nil {
		f.TTFT = o.TTFT
	}
	if o.ITL != nil {
		f.ITL = o.ITL
	}
	if o.CutAfter != nil {
		f.CutAfter = o.CutAfter
	}
	if o.ExitAfter != nil {
		f.ExitAfter = o.ExitAfter
	}
	return f
}

// String is the fault in flag syntax, for records.
func (f Fault) String() string {
	var a []string
	if f.Status != 0 {
		a = append(a, "status="+strconv.Itoa(f.Status))
	}
	if f.ResetBeforeHeaders {
		a = append(a, "reset-before-headers")
	}
	if f.ResetMidStream {
		a = append(a, "reset-mid-stream")
	}
	if f.SlowHeaders > 0 {
		a = append(a, "slow-headers="+f.SlowHeaders.String())
	}
	if f.StallBody > 0 {
		a = append(a, "stall-body="+f.StallBody.String())
	}
	if f.ECKey != "" {
		a = append(a, "ec-key="+f.ECKey)
	}
	if f.KVDrop {
		a = append(a, "kv-drop")
	}
	if f.Trickle > 0 {
		a = append(a, "trickle="+f.Trickle.String())
	}
	if f.Delay > 0 {
		a = append(a, "delay="+f.Delay.String())
	}
	if f.TTFT != nil {
		a = append(a, "ttft="+f.TTFT.String())
	}
	if f.ITL != nil {
		a = append(a, "itl="+f.ITL.String())
	}
	if f.CutAfter != nil {
		a = append(a, "cut-after="+strconv.Itoa(*f.CutAfter))
	}
	if f.ExitAfter != nil {
		a = append(a, "exit-after="+strconv.Itoa(*f.ExitAfter))
	}
	return strings.Join(a, ",")
}

// faultSet holds the flag faults and their remaining counts.
type faultSet struct {
	mu     sync.Mutex
	faults []Fault
	left   []int
	seen   []int // matching requests so far, for every=N
}

func newFaultSet(fs []Fault) *faultSet {
	s := &faultSet{faults: fs, left: make([]int, len(fs)), seen: make([]int, len(fs))}
	for i, f := range fs {
		s.left[i] = f.Times
	}
	return s
}

// plan returns the fault for one request of role: the flag faults that
// apply (consuming a count), then the header's, merged in that order.
func (s *faultSet) plan(role Role, header string) (Fault, error) {
	var out Fault
	s.mu.Lock()
	for i, f := range s.faults {
		if f.Role != "" && f.Role != role {
			continue
		}
		if s.seen[i]++; f.Every > 0 && s.seen[i]%f.Every != 0 {
			continue
		}
		if f.Times > 0 {
			if s.left[i] == 0 {
				continue
			}
			s.left[i]--
		}
		out = out.merge(f)
	}
	s.mu.Unlock()
	if header == "" {
		return out, nil
	}
	hf, err := ParseFaults(header)
	if err != nil {
		return out, err
	}
	for _, f := range hf {
		if f.Role == "" || f.Role == role {
			out = out.merge(f)
		}
	}
	return out, nil
}

// sleep waits d or until ctx ends; it reports whether the full wait passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// resetConn resets the TCP connection (RST), so the peer sees a reset rather
// than a clean end; with flush, what was written goes out first (flushing
// before any write would send a 200 status line). Where hijacking is not
// possible it aborts the handler, which also ends the reply abnormally.
func resetConn(w http.ResponseWriter, flush bool) {
	rc := http.NewResponseController(w)
	if flush {
		_ = rc.Flush()
	}
	conn, _, err := rc.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
