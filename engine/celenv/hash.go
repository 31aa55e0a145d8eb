package celenv

import (
	"math"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// Stable hashing for sticky splits (issue 18): `hash(s)` and
// `bucket(s, n)` give the same value for the same string on every
// version, replica and architecture, so a split by a header
// (`bucket(request.headers[?"x-user"].orValue(""), 100) < 10`) keeps a
// user on one side. The definition is part of the workflow language
// (docs/workflow-reference.md, "Stable hashing") and pinned by golden
// values (hash_test.go): never change it.
//
//	fnv(s)       = FNV-1a 64 of the UTF-8 bytes of s
//	               (offset basis 14695981039346656037, prime 1099511628211)
//	hash(s)      = fnv(s) with its top bit cleared, an int in [0, 2^63)
//	bucket(s, n) = fnv(s) mod n (unsigned 64-bit), an int in [0, n);
//	               n < 1 is an evaluation error
//
// It is written out rather than taken from hash/fnv so that the bytes
// hashed and the arithmetic are visible where the promise is made.

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// Fnv1a64 is fnv(s) above.
func Fnv1a64(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ { // bytes, not runes: the UTF-8 encoding
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// Hash is hash(s): non-negative.
func Hash(s string) int64 { return int64(Fnv1a64(s) & math.MaxInt64) }

// Bucket is bucket(s, n); ok is false for n < 1.
func Bucket(s string, n int64) (int64, bool) {
	if n < 1 {
		return 0, false
	}
	return int64(Fnv1a64(s) % uint64(n)), true
}

// Overload ids, for the cost model.
const (
	hashOverload   = "hash_string"
	bucketOverload = "bucket_string_int"
)

// hashLib declares hash and bucket.
func hashLib() cel.EnvOption {
	return cel.Lib(hashFuncs{})
}

type hashFuncs struct{}

func (hashFuncs) CompileOptions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Function("hash",
			cel.Overload(hashOverload, []*cel.Type{cel.StringType}, cel.IntType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					s, ok := v.(types.String)
					if !ok {
						return types.MaybeNoSuchOverloadErr(v)
					}
					return types.Int(Hash(string(s)))
				}))),
		cel.Function("bucket",
			cel.Overload(bucketOverload, []*cel.Type{cel.StringType, cel.IntType}, cel.IntType,
				cel.BinaryBinding(func(a, b ref.Val) ref.Val {
					s, ok1 := a.(types.String)
					n, ok2 := b.(types.Int)
					if !ok1 || !ok2 {
						return types.MaybeNoSuchOverloadErr(a)
					}
					r, ok := Bucket(string(s), int64(n))
					if !ok {
						return types.NewErr("bucket(s, n) needs n >= 1, got %d", int64(n))
					}
					return types.Int(r)
				}))),
	}
}

func (hashFuncs) ProgramOptions() []cel.ProgramOption { return nil }

// hashCost is the cost of hashing a string of up to n bytes: one unit for
// the call and one per ten bytes, as cel-go charges a string traversal
// (common.StringTraversalCostFactor).
func hashCost(n uint64) uint64 { return 1 + uint64(math.Ceil(float64(n)*0.1)) }

// estimateHashCost is sizeEstimator's part for hash and bucket.
func estimateHashCost(overloadID string, args []cost.AstNode) *cost.CallEstimate {
	if overloadID != hashOverload && overloadID != bucketOverload || len(args) == 0 {
		return nil
	}
	sz := cost.SizeEstimate{Min: 0, Max: maxValueLen}
	if c := args[0].ComputedSize(); c != nil {
		sz = *c
	} else if e := (sizeEstimator{}).EstimateSize(args[0]); e != nil {
		sz = *e
	}
	return &cost.CallEstimate{CostEstimate: cost.CostEstimate{Min: hashCost(sz.Min), Max: hashCost(sz.Max)}}
}

// runtimeCost charges hash and bucket by the bytes hashed when an
// expression carries the runtime limit.
type runtimeCost struct{}

func (runtimeCost) CallCost(function, overloadID string, args []ref.Val, result ref.Val) *uint64 {
	if overloadID != hashOverload && overloadID != bucketOverload || len(args) == 0 {
		return nil
	}
	s, ok := args[0].(types.String)
	if !ok {
		return nil
	}
	c := hashCost(uint64(len(s)))
	return &c
}
