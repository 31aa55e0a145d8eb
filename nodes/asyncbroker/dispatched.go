package asyncbroker

import "context"

// Dispatched reports whether ctx is a queued request the dispatcher is
// feeding back through the front: the front's admission lets such work
// only into spare capacity (it never waits in the admission queue ahead of
// online requests; a 429 makes the dispatcher back off and requeue).
func Dispatched(ctx context.Context) bool {
	_, ok := ctx.Value(dispatchKey{}).(*dispatched)
	return ok
}
