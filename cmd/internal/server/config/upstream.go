package config

import (
	"errors"
	"strings"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/schema"
)

// NewUpstream builds the upstream client. The upstream package's own checks
// (mode, URLs, duplicate endpoints, TLS files) come back as diagnostics at
// the key's position in the config file, or naming the variable that set
// it: each *upstream.FieldError carries its key's pointer, so nothing is
// read back from the error text.
func (c *Config) NewUpstream() (*upstream.Client, schema.Diagnostics) {
	cl, err := upstream.New(c.Upstream)
	if err == nil {
		return cl, nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var ds schema.Diagnostics
	for _, e := range errs {
		ptr, rule, msg := "/upstream", schema.RuleUpstream, e.Error()
		var fe *upstream.FieldError
		if errors.As(e, &fe) {
			ptr, msg = "/upstream"+fe.Ptr, fe.Msg
			if fe.Ptr == "/tls" || strings.HasPrefix(fe.Ptr, "/tls/") {
				rule = schema.RuleTLS
			}
		}
		ds = append(ds, c.Diag(ptr, rule, msg))
	}
	return nil, ds.Sort()
}
