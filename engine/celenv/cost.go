package celenv

import (
	"fmt"
	"strings"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
)

// Cost limits (cel-go cost units: roughly one per operation, per list
// element visited and per few bytes of string compared). Every expression's
// worst-case cost is estimated at load under the size bounds below; an
// estimate above CostLimit is a load error (cel/cost-limit). The estimate
// is an upper bound only as far as the bounds hold, and request data can
// exceed them (more headers, longer values), so an expression whose
// estimate exceeds RuntimeLimitAbove, or that iterates (a macro over media,
// headers or vars), is one whose cost grows with request data; it is also
// stopped at run time when its actual cost passes CostLimit, and the
// request then fails with a clear error. Cheaper expressions (field reads
// and comparisons, a few units) carry no runtime tracking: it would make
// every guard dearer for no protection (docs/workflow-reference.md, Cost).
const (
	// CostLimit is per evaluation, as Kubernetes' per-expression limit.
	CostLimit uint64 = 1_000_000
	// RuntimeLimitAbove: estimates above it get the runtime limit.
	RuntimeLimitAbove uint64 = 1_000
	// Size bounds assumed by the estimate.
	maxMediaItems = 64
	maxHeaders    = 128
	maxValueLen   = 8 << 10 // a header value
	maxStringLen  = 256     // any other string: ids, names, models, hashes
	maxListLen    = 1024    // vars lists and maps
)

// sizeEstimator bounds the sizes cel-go cannot know from the expression.
type sizeEstimator struct{}

func (sizeEstimator) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	p := strings.Join(n.Path(), ".")
	switch {
	case p == "media":
		return &cost.SizeEstimate{Min: 0, Max: maxMediaItems}
	case strings.HasSuffix(p, ".headers"):
		return &cost.SizeEstimate{Min: 0, Max: maxHeaders}
	case strings.HasSuffix(p, ".headers.@values"):
		return &cost.SizeEstimate{Min: 0, Max: maxValueLen}
	}
	if t := n.Type(); t != nil {
		switch t.Kind() {
		case types.StringKind, types.BytesKind:
			return &cost.SizeEstimate{Min: 0, Max: maxStringLen}
		case types.ListKind, types.MapKind:
			return &cost.SizeEstimate{Min: 0, Max: maxListLen}
		}
	}
	return nil
}

func (sizeEstimator) EstimateCallCost(function, overloadID string, target *cost.AstNode, args []cost.AstNode) *cost.CallEstimate {
	return estimateHashCost(overloadID, args)
}

func costIssue(max uint64) Issue {
	return Issue{Line: 1, Col: 0, Rule: "cel/cost-limit",
		Msg: fmt.Sprintf("estimated cost up to %d exceeds the limit of %d (assuming at most %d media items, %d headers of %d bytes, %d-byte strings, %d-element vars)",
			max, CostLimit, maxMediaItems, maxHeaders, maxValueLen, maxStringLen, maxListLen),
		Hint: "iterate less: filter before nesting macros, avoid regexes inside loops"}
}

// iterates reports whether the expression has a comprehension (a macro:
// all, exists, map, filter...), whose cost grows with the data it ranges over.
func iterates(root celast.Expr) bool {
	found := false
	celast.PreOrderVisit(root, celast.NewExprVisitor(func(e celast.Expr) {
		found = found || e.Kind() == celast.ComprehensionKind
	}))
	return found
}
