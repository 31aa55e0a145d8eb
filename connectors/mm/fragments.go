package mm

import (
	"fmt"
	"strconv"

	"github.com/celflow/celflow/internal/jsonb"
)

// The builders below produce the small JSON pieces legs splice into bodies.
// Modalities appear in order of their first item, items in order within
// their modality, and empty modalities are omitted (docs/protocol.md, Terms).

// ChatTokensJSON is the chat-format `tokens` value for conditional-decode,
// prefill and decode (docs/protocol.md):
//
//	{"token_ids":T,"features":{"mm_hashes":…,"mm_placeholders":…}}
//
// It is nil when T is unknown (the leg then carries no `tokens`), and has
// `features` only when some item has features; kwargs_data never appears.
func ChatTokensJSON(t Tokens, media []MediaItem) []byte {
	if !t.Known {
		return nil
	}
	ids := TokenJSON(t)
	feats := FeaturesJSON(media, false)
	out := make([]byte, 0, len(ids)+len(feats)+28)
	out = append(out, `{"token_ids":`...)
	out = append(out, ids...)
	if feats != nil {
		out = append(out, `,"features":`...)
		out = append(out, feats...)
	}
	return append(out, '}')
}

// FeaturesJSON is a `features` object over the items that have features:
// mm_hashes and mm_placeholders, plus kwargs_data when withKwargs (each
// item's kwargs as received, JSON null for a cache hit). It is nil when no
// item has features. Generate-format prefill passes withKwargs true; chat
// legs pass false.
func FeaturesJSON(media []MediaItem, withKwargs bool) []byte {
	var mods []string
	n := 0
	for i := range media {
		if !media[i].HasFeatures {
			continue
		}
		n += len(media[i].Hash) + 48
		if withKwargs {
			n += len(media[i].Kwargs) + 1
		}
		mods = addMod(mods, media[i].Modality)
	}
	if mods == nil {
		return nil
	}
	out := make([]byte, 0, n+64)
	out = append(out, `{"mm_hashes":`...)
	out = section(out, media, mods, func(b []byte, it *MediaItem) []byte {
		return jsonb.AppendQuote(b, it.Hash)
	})
	out = append(out, `,"mm_placeholders":`...)
	out = section(out, media, mods, func(b []byte, it *MediaItem) []byte {
		return appendSpan(b, it.Offset, it.Length)
	})
	if withKwargs {
		out = append(out, `,"kwargs_data":`...)
		out = section(out, media, mods, appendKwargs)
	}
	return append(out, '}')
}

func addMod(mods []string, m string) []string {
	for _, x := range mods {
		if x == m {
			return mods
		}
	}
	return append(mods, m)
}

// section writes {"<m>":[entry,…],…} over the items with features.
func section(out []byte, media []MediaItem, mods []string, entry func([]byte, *MediaItem) []byte) []byte {
	out = append(out, '{')
	for mi, m := range mods {
		if mi > 0 {
			out = append(out, ',')
		}
		out = jsonb.AppendQuote(out, m)
		out = append(out, ':', '[')
		first := true
		for i := range media {
			it := &media[i]
			if !it.HasFeatures || it.Modality != m {
				continue
			}
			if !first {
				out = append(out, ',')
			}
			first = false
			out = entry(out, it)
		}
		out = append(out, ']')
	}
	return append(out, '}')
}

func appendSpan(b []byte, off, length int) []byte {
	b = append(b, `{"offset":`...)
	b = strconv.AppendInt(b, int64(off), 10)
	b = append(b, `,"length":`...)
	b = strconv.AppendInt(b, int64(length), 10)
	return append(b, '}')
}

func appendKwargs(b []byte, it *MediaItem) []byte {
	if len(it.Kwargs) == 0 {
		return append(b, nullJSON...)
	}
	return append(b, it.Kwargs...)
}

// ItemTokensJSON is the token list of one item's encode sub-request
// (docs/protocol.md, Encode): [T[0]] followed by Length copies of
// T[Offset] — BOS, then the model's placeholder token. It fails when the
// item has no features or its span is outside T.
func ItemTokensJSON(t Tokens, it *MediaItem) ([]byte, error) {
	if !t.Known || len(t.IDs) == 0 {
		return nil, fmt.Errorf("the prompt's token ids are unknown")
	}
	if !it.HasFeatures {
		return nil, fmt.Errorf("%s item %d has no render features", it.Modality, it.Part)
	}
	if it.Offset < 0 || it.Length < 0 || it.Offset >= len(t.IDs) || it.Length > len(t.IDs)-it.Offset {
		return nil, fmt.Errorf("%s item %d: span {%d,%d} is outside the prompt of %d tokens", it.Modality, it.Part, it.Offset, it.Length, len(t.IDs))
	}
	bos := strconv.AppendInt(nil, t.IDs[0], 10)
	ph := strconv.AppendInt(nil, t.IDs[it.Offset], 10)
	out := make([]byte, 0, 2+len(bos)+it.Length*(len(ph)+1))
	out = append(out, '[')
	out = append(out, bos...)
	for range it.Length {
		out = append(out, ',')
		out = append(out, ph...)
	}
	return append(out, ']'), nil
}

// ItemFeaturesJSON is the `features` of one item's encode sub-request: its
// hash and the placeholder {offset:1,length:n} (the span right after BOS in
// ItemTokensJSON), plus its kwargs when withKwargs (generate format; null
// for a cache hit).
func ItemFeaturesJSON(it *MediaItem, withKwargs bool) []byte {
	m := jsonb.Quote(it.Modality)
	out := make([]byte, 0, 96+len(it.Hash)+2*len(m)+len(it.Kwargs))
	out = append(out, `{"mm_hashes":{`...)
	out = append(out, m...)
	out = append(out, `:[`...)
	out = jsonb.AppendQuote(out, it.Hash)
	out = append(out, `]},"mm_placeholders":{`...)
	out = append(out, m...)
	out = append(out, `:[`...)
	out = appendSpan(out, 1, it.Length)
	out = append(out, ']', '}')
	if withKwargs {
		out = append(out, `,"kwargs_data":{`...)
		out = append(out, m...)
		out = append(out, `:[`...)
		out = appendKwargs(out, it)
		out = append(out, ']', '}')
	}
	return append(out, '}')
}

// ItemChatTokensJSON is the chat-format `tokens` value of one item's encode
// sub-request: {"token_ids":ItemTokensJSON,"features":ItemFeaturesJSON(no kwargs)}.
func ItemChatTokensJSON(t Tokens, it *MediaItem) ([]byte, error) {
	ids, err := ItemTokensJSON(t, it)
	if err != nil {
		return nil, err
	}
	f := ItemFeaturesJSON(it, false)
	out := make([]byte, 0, len(ids)+len(f)+28)
	out = append(out, `{"token_ids":`...)
	out = append(out, ids...)
	out = append(out, `,"features":`...)
	out = append(out, f...)
	return append(out, '}'), nil
}
