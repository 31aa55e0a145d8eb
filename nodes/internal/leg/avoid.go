package leg

import (
	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// PickAvoiding picks a target for role (the pool x's target rule chose,
// else the role's) other than the endpoints in urls, the ones a broken leg
// of this request used (decode failover). When every endpoint is to be
// avoided it picks among all of them: a worker restarted since may answer.
// In gateway mode the gateway picks; nothing can be avoided.
func PickAvoiding(x *engine.Exec, c *upstream.Client, role upstream.Role, urls []string) (*upstream.Target, *engine.Error) {
	if !c.Direct() || len(urls) == 0 {
		return pick(c, role, pool(x), nil, cacheKey(x))
	}
	if t, e := pick(c, role, pool(x), urls, cacheKey(x)); e == nil {
		return t, nil
	}
	return pick(c, role, pool(x), nil, cacheKey(x))
}
