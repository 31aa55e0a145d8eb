package asyncbroker

import (
	"context"
	"testing"
)

// The front's admission tells dispatched requests from online ones by
// their context (Dispatcher.serve sets it).
func TestDispatched(t *testing.T) {
	if Dispatched(context.Background()) {
		t.Fatal("an online request reads as dispatched")
	}
	ctx := context.WithValue(context.Background(), dispatchKey{}, &dispatched{tenant: "t", tier: "batch"})
	if !Dispatched(ctx) {
		t.Fatal("a dispatched request reads as online")
	}
}
