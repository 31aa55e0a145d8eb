package sim

// return_token_ids, as vLLM's OpenAI server answers it: non-streamed, each
// choice carries token_ids (its answer's ids) and the prompt's ids ride at
// the top level (chat) or in each choice (completions); streamed, every
// event's choice carries the ids of the tokens it adds, and the prompt's
// ids come once: in the first event (chat, top level) or in each choice's
// first event (completions). The generate route always answers token ids.

// answerIDs is the token ids of choice ci's answer.
func (g genPlan) answerIDs(ci int) []int {
	ids := make([]int, g.count)
	for i := range ids {
		ids[i] = g.token(ci, i)
	}
	return ids
}

// streamIDs adds the return_token_ids fields to the events of one stream.
type streamIDs struct {
	g      genPlan
	on     bool
	prompt []int
	sent   []bool // completions: the choice's first event went out
}

func newStreamIDs(g genPlan, req *request) *streamIDs {
	return &streamIDs{g: g, on: req.ReturnTokenIDs, prompt: req.Prompt.Tokens, sent: make([]bool, g.choices)}
}

// chatPrompt is the prompt's ids for the first chat event, nil after it (or
// when the request did not ask).
func (s *streamIDs) chatPrompt() []int {
	if !s.on || s.prompt == nil {
		return nil
	}
	p := s.prompt
	s.prompt = nil
	return p
}

// choices fills in the ids of the event that carries token i of choice ci
// (i < 0: its finish event, which adds no token).
func (s *streamIDs) choices(v any, ci, i int) any {
	if !s.on {
		return v
	}
	var ids []int
	if i >= 0 {
		ids = []int{s.g.token(ci, i)}
	}
	switch cs := v.(type) {
	case []chatChunkChoice:
		cs[0].TokenIDs = ids
	case []completionChunkChoice:
		cs[0].TokenIDs = ids
		if !s.sent[ci] {
			cs[0].PromptTokenIDs = s.prompt
		}
	}
	s.sent[ci] = true
	return v
}
