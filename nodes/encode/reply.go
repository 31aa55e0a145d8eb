package encode

import (
	"bytes"
	"errors"

	"github.com/sirupsen/logrus"

	"github.com/celflow/celflow/connectors/ec"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/leg"
)

// ecParams reads only ec_transfer_params from an encoder reply
// (docs/protocol.md, Encode).
// A string, array, null, {} or absent field is ignored, whatever the
// connector: nil, no error. A non-empty object is an
// answer about this item, so it is checked like client input (issue 10):
// every member must be named by the item's hash, which the leg sent as the
// part's uuid (chat) or in features.mm_hashes (generate); a member named
// otherwise (the descriptor of another item: with two images an encoder
// answered img_0_… for img_1_…) is KindUpstreamProtocol (502
// upstream_protocol_error), and nothing of the reply is merged; so is a
// reply that repeats a member name anywhere (jsonb refuses duplicates). The
// reply's keys go to the log only. An item without a hash (render gave it
// no features) has nothing to check against: its params are kept as sent.
func ecParams(x *engine.Exec, raw []byte, hash string) (ec.Params, *engine.Error) {
	top, err := jsonb.Parse(raw)
	var dup *jsonb.DuplicateKeyError
	switch {
	case errors.As(err, &dup): // Python's json never writes one; last-wins readers would differ
		leg.Log(x).WithError(err).Warn("encoder reply repeats a member name; refused")
		return nil, engine.Errorf(engine.KindUpstreamProtocol, "encoder reply repeats a member name")
	case err != nil:
		return nil, nil // not an object: nothing to read (ReadJSON judged JSON)
	}
	i := top.Find("ec_transfer_params")
	var obj *jsonb.Object
	if i >= 0 {
		if m := top.Members[i]; raw[m.ValStart] == '{' {
			obj, _ = jsonb.ObjectAt(raw, m.ValStart)
		}
	}
	if obj == nil || len(obj.Members) == 0 {
		if logrus.IsLevelEnabled(logrus.DebugLevel) {
			leg.Log(x).WithField("present", i >= 0).Debug("encoder reply has no usable ec_transfer_params; ignored")
		}
		return nil, nil
	}
	p := make(ec.Params, 1)
	for _, m := range obj.Members {
		_, dup := p[m.Key]
		if (hash != "" && m.Key != hash) || dup {
			keys := make([]string, 0, len(obj.Members))
			for _, k := range obj.Members {
				keys = append(keys, engine.CutUTF8(k.Key, 128))
			}
			leg.Log(x).WithFields(logrus.Fields{"item_hash": hash, "reply_keys": keys}).
				Warn("encoder reply's ec_transfer_params is not keyed by this item's hash; refused")
			msg := "encoder reply's ec_transfer_params names another item's hash, not this item's"
			if dup {
				msg = "encoder reply's ec_transfer_params repeats a hash"
			}
			return nil, engine.Errorf(engine.KindUpstreamProtocol, "%s", msg)
		}
		p[m.Key] = bytes.Clone(raw[m.ValStart:m.ValEnd]) // the reply buffer is not kept
	}
	return p, nil
}
