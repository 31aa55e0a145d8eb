package sim

import (
	"fmt"
	"strings"
)

// Role is one vLLM deployment role the simulator can play. The values are
// the EPP-Profile values (docs/protocol.md, Set by celflow), plus render (a side service).
type Role string

// The roles. A worker process may serve several of them on one port.
const (
	RoleRender  Role = "render"
	RoleEncode  Role = "encode"
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// AllRoles is every role, in pipeline order.
var AllRoles = []Role{RoleRender, RoleEncode, RolePrefill, RoleDecode}

func (r Role) valid() bool {
	switch r {
	case RoleRender, RoleEncode, RolePrefill, RoleDecode:
		return true
	}
	return false
}

// isWorker reports whether the role serves the inference endpoints (the
// three client paths), as opposed to render's /render endpoints.
func (r Role) isWorker() bool { return r == RoleEncode || r == RolePrefill || r == RoleDecode }

// ParseRoles parses a comma-separated role list ("render,prefill"). Empty
// entries are an error, duplicates are folded.
func ParseRoles(s string) ([]Role, error) {
	var out []Role
	seen := map[Role]bool{}
	for _, f := range strings.Split(s, ",") {
		r := Role(strings.TrimSpace(strings.ToLower(f)))
		if !r.valid() {
			return nil, fmt.Errorf("unknown role %q (want render, encode, prefill or decode)", f)
		}
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out, nil
}
