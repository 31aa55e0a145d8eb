// Package all links every shipped node type into the binary. Each node
// package registers its type in init(); node helpers add one blank import
// per package here, e.g.
//
//	_ "github.com/celflow/celflow/nodes/decode"
package all

import (
	_ "github.com/celflow/celflow/nodes/asyncbroker"
	_ "github.com/celflow/celflow/nodes/conditionaldecode"
	_ "github.com/celflow/celflow/nodes/decode"
	_ "github.com/celflow/celflow/nodes/encode"
	_ "github.com/celflow/celflow/nodes/fetchmedia"
	_ "github.com/celflow/celflow/nodes/prefill"
	_ "github.com/celflow/celflow/nodes/render"
)
