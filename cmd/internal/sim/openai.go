package sim

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Wire types of vLLM's OpenAI-compatible replies. Field order and the
// explicit nulls follow what vLLM's pydantic models dump, which is a
// superset of OpenAI's shapes (openai clients decode both).

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	TotalTokens         int `json:"total_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails any `json:"prompt_tokens_details"`
}

// promptTokensDetails is vLLM's PromptTokenUsageInfo: the prompt tokens
// served from the prefix cache (whole blocks only).
type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type chatMessageOut struct {
	Role             string `json:"role"`
	Content          string `json:"content"`
	Refusal          any    `json:"refusal"`
	Annotations      any    `json:"annotations"`
	Audio            any    `json:"audio"`
	FunctionCall     any    `json:"function_call"`
	ToolCalls        []any  `json:"tool_calls"`
	ReasoningContent any    `json:"reasoning_content"`
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatMessageOut `json:"message"`
	Logprobs     any            `json:"logprobs"`
	FinishReason string         `json:"finish_reason"`
	StopReason   any            `json:"stop_reason"`
	TokenIDs     []int          `json:"token_ids,omitempty"` // return_token_ids
}

// transferOut are the disaggregation fields vLLM (and SGLang) add to a reply.
type transferOut struct {
	KV            any     `json:"kv_transfer_params"`
	EC            any     `json:"ec_transfer_params,omitempty"`
	BootstrapHost *string `json:"bootstrap_host,omitempty"`
	BootstrapPort *int64  `json:"bootstrap_port,omitempty"`
	BootstrapRoom *uint64 `json:"bootstrap_room,omitempty"`
}

type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	ServiceTier       any          `json:"service_tier"`
	SystemFingerprint any          `json:"system_fingerprint"`
	Usage             usage        `json:"usage"`
	PromptLogprobs    any          `json:"prompt_logprobs"`
	PromptTokenIDs    []int        `json:"prompt_token_ids,omitempty"` // return_token_ids
	transferOut
}

type completionChoice struct {
	Index          int    `json:"index"`
	Text           string `json:"text"`
	Logprobs       any    `json:"logprobs"`
	FinishReason   string `json:"finish_reason"`
	StopReason     any    `json:"stop_reason"`
	TokenIDs       []int  `json:"token_ids,omitempty"` // return_token_ids
	PromptLogprobs any    `json:"prompt_logprobs"`
	PromptTokenIDs []int  `json:"prompt_token_ids,omitempty"` // return_token_ids
}

type completionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []completionChoice `json:"choices"`
	ServiceTier       any                `json:"service_tier"`
	SystemFingerprint any                `json:"system_fingerprint"`
	Usage             usage              `json:"usage"`
	transferOut
}

type generateChoice struct {
	Index        int    `json:"index"`
	Logprobs     any    `json:"logprobs"`
	FinishReason string `json:"finish_reason"`
	TokenIDs     []int  `json:"token_ids"`
}

type generateResponse struct {
	RequestID      string           `json:"request_id"`
	Model          string           `json:"model"`
	Created        int64            `json:"created"`
	Choices        []generateChoice `json:"choices"`
	Usage          usage            `json:"usage"`
	PromptLogprobs any              `json:"prompt_logprobs"`
	transferOut
}

// Streaming chunks.

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
	TokenIDs     []int     `json:"token_ids,omitempty"` // return_token_ids: this event's tokens
}

type completionChunkChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	// return_token_ids: the prompt's ids in the choice's first event, this
	// event's tokens in each.
	PromptTokenIDs []int `json:"prompt_token_ids,omitempty"`
	TokenIDs       []int `json:"token_ids,omitempty"`
}

type generateChunkChoice struct {
	Index        int     `json:"index"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	TokenIDs     []int   `json:"token_ids"`
}

// chunk is one SSE event. Usage is present (null or a value) only when the
// client asked for include_usage, as OpenAI does.
type chunk struct {
	ID        string `json:"id,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	Object    string `json:"object,omitempty"`
	Created   int64  `json:"created,omitempty"`
	Model     string `json:"model,omitempty"`
	Choices   any    `json:"choices"`
	// PromptTokenIDs: chat with return_token_ids, in the first event only.
	PromptTokenIDs []int  `json:"prompt_token_ids,omitempty"`
	Usage          *usage `json:"-"`
	withUsage      bool
}

func (c chunk) MarshalJSON() ([]byte, error) {
	type plain chunk
	b, err := json.Marshal(plain(c))
	if err != nil || !c.withUsage {
		return b, err
	}
	u, err := json.Marshal(c.Usage)
	if err != nil {
		return nil, err
	}
	b = append(b[:len(b)-1], `,"usage":`...)
	b = append(b, u...)
	return append(b, '}'), nil
}

// errorBody is vLLM's OpenAI-style error reply.
type errorBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   any    `json:"param"`
		Code    int    `json:"code"`
	} `json:"error"`
}

// writeError answers status with an OpenAI-style JSON error, as vLLM does.
func writeError(w http.ResponseWriter, status int, msg string) {
	var e errorBody
	e.Error.Message = msg
	e.Error.Type = errorType(status)
	e.Error.Code = status
	writeJSON(w, status, e)
}

func errorType(status int) string {
	switch {
	case status == http.StatusNotFound:
		return "NotFoundError"
	case status == http.StatusPreconditionFailed:
		return "PreconditionFailedError"
	case status < 500:
		return "BadRequestError"
	case status == http.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	}
	return "InternalServerError"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"marshal failed","type":"InternalServerError","param":null,"code":500}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
