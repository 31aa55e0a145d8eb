package engine

import (
	"time"

	"github.com/celflow/celflow/schema"
)

// The typed workflow document. Each struct mirrors one object of
// schema/workflow.json field for field (the `json` tag is the key), and
// docs/workflow-reference.md has one table row per field:
// TestDocDeclaredOnce fails when the three drift apart. To add a field,
// add it here, in the schema and in the doc; the loader then reads it from
// the struct, with its position, never from an untyped map.

// workflowDoc is the whole file.
type workflowDoc struct {
	schema.Pos
	APIVersion     schema.Val[string]          `json:"apiVersion"`
	Kind           schema.Val[string]          `json:"kind"`
	Metadata       *metadataDoc                `json:"metadata"`
	Routes         schema.Val[[]string]        `json:"routes"`
	Defaults       *defaultsFieldsDoc          `json:"defaults"`
	RequestTimeout schema.Val[time.Duration]   `json:"request_timeout"`
	Vars           schema.Map[schema.Val[any]] `json:"vars"`
	Nodes          []nodeDoc                   `json:"nodes"`
	Tests          []testDoc                   `json:"tests"`
	Allow          []allowDoc                  `json:"allow"`
}

// allowDoc is one entry of `allow:` (loadlit.go): a finding accepted by
// rule and path.
type allowDoc struct {
	schema.Pos
	Rule schema.Val[string] `json:"rule"`
	At   schema.Val[string] `json:"at"`
	Why  schema.Val[string] `json:"why"`
}

type metadataDoc struct {
	Name        schema.Val[string] `json:"name"`
	Version     schema.Val[string] `json:"version"`
	Description schema.Val[string] `json:"description"`
}

type defaultsFieldsDoc struct {
	KVConnector schema.Val[string]        `json:"kv_connector"`
	ECConnector schema.Val[string]        `json:"ec_connector"`
	Format      schema.Val[string]        `json:"format"`
	Timeout     schema.Val[time.Duration] `json:"timeout"`
	MaxParallel schema.Val[int]           `json:"max_parallel"`
	Retry       *retryDoc                 `json:"retry"`
	OnCELError  schema.Val[string]        `json:"on_cel_error"`
}

// targetDoc is one target rule of a node (target.go).
type targetDoc struct {
	schema.Pos
	If      schema.Val[string]             `json:"if"`
	Pool    schema.Val[string]             `json:"pool"`
	Model   schema.Val[string]             `json:"model"`
	Headers schema.Map[schema.Val[string]] `json:"headers"`
	// Timeouts of the chosen rule replace the node's for this request.
	Timeout           schema.Val[time.Duration] `json:"timeout"`
	TTFBTimeout       schema.Val[time.Duration] `json:"ttfb_timeout"`
	StreamIdleTimeout schema.Val[time.Duration] `json:"stream_idle_timeout"`
}

// nodeDoc is one entry of nodes:.
type nodeDoc struct {
	schema.Pos
	ID          schema.Val[string]        `json:"id"`
	Type        schema.Val[string]        `json:"type"`
	Description schema.Val[string]        `json:"description"`
	Params      schema.Val[any]           `json:"params"`
	Needs       []needDoc                 `json:"needs"`
	When        schema.Val[string]        `json:"when"`
	ForEach     schema.Val[string]        `json:"foreach"`
	MaxParallel schema.Val[int]           `json:"max_parallel"`
	Tolerate    schema.Val[int]           `json:"tolerate"`
	Join        schema.Val[string]        `json:"join"`
	Timeout     schema.Val[time.Duration] `json:"timeout"`
	Retry       *retryDoc                 `json:"retry"`
	Target      []targetDoc               `json:"target"`
}

// needDoc is a need: a node id, or {node, if}.
type needDoc struct {
	schema.Pos
	Short bool               `json:"-"` // written as a bare id
	Node  schema.Val[string] `json:"node"`
	If    schema.Val[string] `json:"if"`
}

// DecodeDoc implements schema.Decoder for the string-or-object union.
func (n *needDoc) DecodeDoc(d *schema.Doc, ptr string) {
	v, _ := d.Value(ptr)
	switch v.(type) {
	case string:
		n.Short = true
		n.Node.DecodeDoc(d, ptr)
		n.Pos = n.Node.Pos
	case map[string]any:
		n.Node.DecodeDoc(d, schema.Ptr(ptr, "node"))
		n.If.DecodeDoc(d, schema.Ptr(ptr, "if"))
		l, c := d.Pos(ptr)
		n.Pos = schema.Pos{Ptr: ptr, Line: l, Col: c}
	}
}

type retryDoc struct {
	schema.Pos
	Attempts   schema.Val[int]           `json:"attempts"`
	Backoff    schema.Val[time.Duration] `json:"backoff"`
	MaxBackoff schema.Val[time.Duration] `json:"max_backoff"`
	Jitter     schema.Val[bool]          `json:"jitter"`
	If         schema.Val[string]        `json:"if"`
}

// testDoc is one entry of tests: (testsblock.go compiles it).
type testDoc struct {
	schema.Pos
	Name    schema.Val[string]          `json:"name"`
	Request *testRequestDoc             `json:"request"`
	Assume  schema.Map[schema.Val[any]] `json:"assume"`
	Expect  *testExpectDoc              `json:"expect"`
}

type testRequestDoc struct {
	Route   schema.Val[string]            `json:"route"`
	Body    schema.Val[any]               `json:"body"`
	Headers schema.Val[map[string]string] `json:"headers"`
	Tokens  schema.Val[int]               `json:"tokens"`
}

type testExpectDoc struct {
	Ran        []schema.Val[string]        `json:"ran"`
	Skipped    []schema.Val[string]        `json:"skipped"`
	Omitted    []schema.Val[string]        `json:"omitted"`
	Failed     []schema.Val[string]        `json:"failed"`
	AnsweredBy schema.Val[string]          `json:"answered_by"`
	Status     schema.Val[int]             `json:"status"`
	Code       schema.Val[string]          `json:"code"`
	Attempts   schema.Map[schema.Val[int]] `json:"attempts"`
	Targets    schema.Map[schema.Val[any]] `json:"targets"`
}

// list returns one of the expect lists by its key (expectLists), and
// whether the document has it.
func (e *testExpectDoc) list(k string) ([]schema.Val[string], bool) {
	var l []schema.Val[string]
	switch k {
	case "ran":
		l = e.Ran
	case "skipped":
		l = e.Skipped
	case "omitted":
		l = e.Omitted
	case "failed":
		l = e.Failed
	}
	return l, l != nil
}
