package fetchmedia

import (
	"container/list"
	"sync"
	"time"
)

// cache keeps successful downloads across requests (docs/protocol.md,
// fetch-media): keyed by URL, bounded by total bytes (least recently used
// evicted first) and by a per-entry TTL. Failures are never stored. Stored
// bytes are immutable and shared by readers.
type cache struct {
	mu    sync.Mutex
	max   int64
	ttl   time.Duration
	used  int64
	order *list.List // front: most recently used
	byURL map[string]*list.Element
	now   func() time.Time
}

type cacheEntry struct {
	url     string
	typ     string
	data    []byte
	expires time.Time
}

func newCache(maxBytes int64, ttl time.Duration) *cache {
	return &cache{max: maxBytes, ttl: ttl, order: list.New(), byURL: map[string]*list.Element{}, now: time.Now}
}

func (c *cache) get(url string) (typ string, data []byte, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byURL[url]
	if !ok {
		return "", nil, false
	}
	e := el.Value.(*cacheEntry)
	if c.now().After(e.expires) {
		c.remove(el)
		return "", nil, false
	}
	c.order.MoveToFront(el)
	return e.typ, e.data, true
}

// put stores a success; an entry larger than the whole cache is not kept.
func (c *cache) put(url, typ string, data []byte) {
	size := int64(len(data))
	if size > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byURL[url]; ok {
		c.remove(el)
	}
	for c.used+size > c.max {
		c.remove(c.order.Back())
	}
	c.byURL[url] = c.order.PushFront(&cacheEntry{url: url, typ: typ, data: data, expires: c.now().Add(c.ttl)})
	c.used += size
}

func (c *cache) remove(el *list.Element) {
	e := c.order.Remove(el).(*cacheEntry)
	delete(c.byURL, e.url)
	c.used -= int64(len(e.data))
}

// bytes is the total size held (tests).
func (c *cache) bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}
