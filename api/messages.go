package api

import "encoding/json"

// MessageRequest is the part of a Messages request body that sluice reads.
// Fields it does not interpret stay in the raw body, which is always what is
// sent on: sluice never re-encodes a request.
type MessageRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	Messages      []InputMessage  `json:"messages"`
	System        json.RawMessage `json:"system,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	TopK          *int            `json:"top_k,omitempty"`
	StopSequences []string        `json:"stop_sequences,omitempty"`
	Tools         json.RawMessage `json:"tools,omitempty"`
	CacheControl  *CacheControl   `json:"cache_control,omitempty"`
	ServiceTier   string          `json:"service_tier,omitempty"`
	Speed         string          `json:"speed,omitempty"`
}

// InputMessage is one entry of "messages"; Content is a string or an array
// of content blocks.
type InputMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// ContentBlock is a content block of a request or a response. Only text
// blocks carry Text; other kinds are kept opaque.
type ContentBlock struct {
	Type         string        `json:"type"`
	Text         string        `json:"text"`
	CacheControl *CacheControl `json:"cache_control,omitempty"`
}

// CacheControl marks a prompt-cache breakpoint. TTL is "5m" (default) or "1h".
type CacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl,omitempty"`
}

// Message is a Messages API response.
type Message struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []ContentBlock `json:"content"`
	StopReason   string         `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        Usage          `json:"usage"`
}

// Stop reasons a Message can end with.
const (
	StopEndTurn      = "end_turn"
	StopMaxTokens    = "max_tokens"
	StopSequence     = "stop_sequence"
	StopToolUse      = "tool_use"
	StopPauseTurn    = "pause_turn"
	StopRefusal      = "refusal"
	StopContextLimit = "model_context_window_exceeded"
)

// Usage is the token accounting of one response. Total input is
// InputTokens + CacheCreationInputTokens + CacheReadInputTokens.
type Usage struct {
	InputTokens              int64          `json:"input_tokens"`
	CacheCreationInputTokens int64          `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64          `json:"cache_read_input_tokens"`
	CacheCreation            *CacheCreation `json:"cache_creation,omitempty"`
	OutputTokens             int64          `json:"output_tokens"`
	ServiceTier              string         `json:"service_tier,omitempty"`
	InferenceGeo             string         `json:"inference_geo,omitempty"`
	// Kept raw; nil encodes as null, as the API sends when unused.
	ServerToolUse       json.RawMessage `json:"server_tool_use"`
	OutputTokensDetails json.RawMessage `json:"output_tokens_details"`
}

// CacheCreation splits cache writes by TTL.
type CacheCreation struct {
	Ephemeral5m int64 `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
}

// Service tiers reported in usage.service_tier.
const (
	TierStandard = "standard"
	TierBatch    = "batch"
	TierPriority = "priority"
)

// TokenCount is the body of a count_tokens response.
type TokenCount struct {
	InputTokens int64 `json:"input_tokens"`
}

// ModelObject is one entry of GET /v1/models.
type ModelObject struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

// Page is the envelope of the API's cursor-paginated lists.
type Page[T any] struct {
	Data    []T     `json:"data"`
	HasMore bool    `json:"has_more"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
}
