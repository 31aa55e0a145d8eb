package mm

import (
	"errors"

	"github.com/celflow/celflow/internal/jsonb"
)

// ParseGenerate validates an /inference/v1/generate body at entry
// (docs/protocol.md, render: Generate) and returns T and the items its
// features describe, so every leg uses the client's own tokens and
// features whether or not a render node runs. obj is body's top-level
// index (jsonb.Parse); nil parses body here.
// Every failure is an *Error of kind BadRequest with the field's path,
// except a body that is not a JSON object (NotJSON) and one with a repeated
// member name (the *jsonb.DuplicateKeyError itself).
//
// T.JSON aliases the client's token_ids bytes (no re-encoding); each item's
// Kwargs aliases its kwargs_data entry, or is JSON null for a cache hit.
func ParseGenerate(body []byte, obj *jsonb.Object) (Tokens, []MediaItem, error) {
	if obj == nil {
		var err error
		if obj, err = jsonb.Parse(body); err != nil {
			var dup *jsonb.DuplicateKeyError
			if errors.As(err, &dup) {
				return Tokens{}, nil, dup
			}
			e := errorf(NotJSON, "request body must be a JSON object")
			e.Cause = err
			return Tokens{}, nil, e
		}
	}
	fail := func(format string, args ...any) (Tokens, []MediaItem, error) {
		return Tokens{}, nil, errorf(BadRequest, format, args...)
	}
	i := obj.Find("token_ids")
	if i < 0 {
		return fail("token_ids: required")
	}
	raw := body[obj.Members[i].ValStart:obj.Members[i].ValEnd]
	ids, err := ParseTokenIDs(raw)
	if err != nil {
		return fail("token_ids%s", pathErr(err))
	}
	if i := obj.Find("sampling_params"); i >= 0 {
		m := obj.Members[i]
		switch body[m.ValStart] {
		case 'n':
		case '{':
			if es, ee, ok := jsonb.Lookup(body, m.ValStart, "extra_args"); ok && body[es] != '{' && body[es] != 'n' {
				return fail("sampling_params.extra_args: must be an object or null, got %s", jsonb.KindOf(body[es:ee]))
			}
		default:
			return fail("sampling_params: must be an object or null, got %s", jsonb.KindOf(body[m.ValStart:m.ValEnd]))
		}
	}
	t := Tokens{Known: true, IDs: ids, JSON: raw[:len(raw):len(raw)]}
	i = obj.Find("features")
	if i < 0 {
		return t, nil, nil
	}
	m := obj.Members[i]
	items, err := parseFeatures(body, m.ValStart, m.ValEnd, len(ids), featureRules{})
	if err != nil {
		return fail("%v", err)
	}
	return t, items, nil
}

// pathErr joins an element error ("[3]: …") or a plain one (": …") to a field name.
func pathErr(err error) string {
	s := err.Error()
	if len(s) > 0 && s[0] == '[' {
		return s
	}
	return ": " + s
}
