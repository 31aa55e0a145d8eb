package leg

import (
	"sync"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// bodyKey holds the run's body index, shared by every leg of the run.
var bodyKey = engine.NewKey[*bodyIndex]("leg.body")

// bodyIndex caches the top-level index of one version of State.Body. The
// index is read-only once built, so legs running at once may share it.
type bodyIndex struct {
	mu  sync.Mutex
	buf []byte
	obj *jsonb.Object
}

// ParseBody indexes the run's current body (State.Body) once per run: the
// conditional-decode, prefill and decode legs of one request all splice
// into the same bytes, and scanning a 200 KB prompt is the dominant cost of
// building a leg. A body that changed since (another slice) is indexed anew.
func ParseBody(x *engine.Exec, body []byte) (*jsonb.Object, *engine.Error) {
	if x == nil || x.Run == nil || len(body) == 0 {
		return parse(body)
	}
	if o := x.Run.State.BodyObj; o != nil && sameSlice(o.Buf, body) {
		return o, nil
	}
	bi := bodyKey.GetOrMake(x.Run, func() *bodyIndex { return &bodyIndex{} })
	bi.mu.Lock()
	defer bi.mu.Unlock()
	if bi.obj != nil && sameSlice(bi.buf, body) {
		return bi.obj, nil
	}
	obj, e := parse(body)
	if e == nil {
		bi.buf, bi.obj = body, obj
	}
	return obj, e
}

func parse(body []byte) (*jsonb.Object, *engine.Error) {
	obj, err := jsonb.Parse(body)
	if err != nil {
		e := engine.Errorf(engine.KindInvalidJSON, "request body: %v", err)
		e.Cause = err
		return nil, e
	}
	return obj, nil
}

func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
