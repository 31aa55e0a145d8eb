package sim

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// SGLang PD rendezvous. The prefill leg registers its room and, like a stock
// SGLang prefill server, waits (bounded by Config.BootstrapWait) for decode
// to join; the decode leg joins by POST /sim/bootstrap/{room} on
// bootstrap_host:bootstrap_port, which waits (bounded) for prefill to arrive.
// So the concurrent shape completes in either arrival order, and the
// sequential shape completes only when BootstrapWait is 0 (a prefill side
// that answers early), as docs/protocol.md (kv-sglang) describes.

// roomJoinWait bounds how long a joining decode waits for its prefill.
const roomJoinWait = 10 * time.Second

type room struct {
	entry              kvEntry
	arrived, joined    chan struct{}
	arriveOnce, joinOn sync.Once
	created            time.Time
}

type rooms struct {
	mu sync.Mutex
	m  map[uint64]*room
}

func (rs *rooms) get(id uint64) *room {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = map[uint64]*room{}
	}
	now := time.Now()
	for k, r := range rs.m { // rooms nobody completed expire
		if now.Sub(r.created) > 2*time.Minute {
			delete(rs.m, k)
		}
	}
	r, ok := rs.m[id]
	if !ok {
		r = &room{arrived: make(chan struct{}), joined: make(chan struct{}), created: now}
		rs.m[id] = r
	}
	return r
}

func (rs *rooms) drop(id uint64) {
	rs.mu.Lock()
	delete(rs.m, id)
	rs.mu.Unlock()
}

// prefillRoom registers the prefill side of a room and waits for decode.
func (w *Worker) prefillRoom(ctx context.Context, b *bootstrap, p promptInfo) error {
	r := w.rooms.get(b.Room)
	r.arriveOnce.Do(func() {
		r.entry = kvEntry{PromptKey: p.Key(), NumTokens: len(p.Tokens), Worker: w.cfg.Name}
		close(r.arrived)
	})
	if w.cfg.BootstrapWait <= 0 {
		return nil
	}
	t := time.NewTimer(w.cfg.BootstrapWait)
	defer t.Stop()
	select {
	case <-r.joined:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		w.rooms.drop(b.Room)
		return &handoffError{Status: http.StatusInternalServerError,
			Msg: "bootstrap room " + strconv.FormatUint(b.Room, 10) + ": decode did not join within " + w.cfg.BootstrapWait.String()}
	}
}

// joinRoom is the decode side: join the room on the bootstrap server and
// check that the prefill there computed this prompt.
func (w *Worker) joinRoom(ctx context.Context, b *bootstrap, p promptInfo) error {
	if b.Host == "" || b.Port <= 0 {
		return handoffErr("bootstrap failed: bootstrap_host and bootstrap_port are required")
	}
	peer := net.JoinHostPort(b.Host, strconv.FormatInt(b.Port, 10))
	ctx, cancel := context.WithTimeout(ctx, roomJoinWait+5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+peer+"/sim/bootstrap/"+strconv.FormatUint(b.Room, 10), nil)
	if err != nil {
		return handoffErr("bootstrap failed: %v", err)
	}
	var e kvEntry
	if err := doJSON(req, &e); err != nil {
		return handoffErr("bootstrap failed: room %d on %s: %v", b.Room, peer, err)
	}
	if e.PromptKey != p.Key() {
		return handoffErr("bootstrap failed: room %d holds the KV of another prompt", b.Room)
	}
	return nil
}

// serveJoin answers POST /sim/bootstrap/{room} for a joining decode.
func (w *Worker) serveJoin(rw http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("room"), 10, 64)
	if err != nil {
		writeError(rw, http.StatusBadRequest, "room: want an integer")
		return
	}
	rm := w.rooms.get(id)
	t := time.NewTimer(w.joinWait)
	defer t.Stop()
	select {
	case <-rm.arrived:
	case <-r.Context().Done():
		return
	case <-t.C:
		w.rooms.drop(id)
		writeError(rw, http.StatusNotFound, "no prefill arrived in room "+r.PathValue("room"))
		return
	}
	rm.joinOn.Do(func() { close(rm.joined) })
	w.rooms.drop(id)
	writeJSON(rw, http.StatusOK, rm.entry)
}
