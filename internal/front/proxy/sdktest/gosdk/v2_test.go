package gosdk_test

import (
	"context"
	"errors"
	"net/http"
	"strings"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// v2Line is github.com/anthropics/anthropic-sdk-go/v2: Authorization:
// Bearer and anthropic-version 2026-10-21.
type v2Line struct{}

func (v2Line) Name() string { return "v2" }

func (v2Line) Connect(baseURL, key string) sdk {
	return &v2Client{cl: anthropic.NewClient(
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(baseURL),
		option.WithAPIKey(key),
		option.WithMaxRetries(0), // a 429 must surface, not be retried away
		option.WithHTTPClient(&http.Client{}),
	)}
}

type v2Client struct{ cl anthropic.Client }

func v2Params(model string, maxTokens int64, text string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: maxTokens,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}}
}

func v2Msg(m *anthropic.Message) msg {
	var b strings.Builder
	for _, c := range m.Content {
		b.WriteString(c.Text)
	}
	return msg{Text: b.String(), StopReason: string(m.StopReason), OutputTokens: m.Usage.OutputTokens}
}

func (c *v2Client) Message(ctx context.Context, model string, maxTokens int64, text string) (msg, error) {
	var resp *http.Response
	m, err := c.cl.Messages.New(ctx, v2Params(model, maxTokens, text), option.WithResponseInto(&resp))
	if err != nil {
		return msg{}, err
	}
	out := v2Msg(m)
	out.RequestID = resp.Header.Get("request-id")
	return out, nil
}

func (c *v2Client) Stream(ctx context.Context, maxTokens int64, text string) ([]string, msg, error) {
	s := c.cl.Messages.NewStreaming(ctx, v2Params(model, maxTokens, text))
	defer s.Close()
	var events []string
	acc := anthropic.Message{}
	for s.Next() {
		ev := s.Current()
		events = append(events, ev.Type)
		if err := acc.Accumulate(ev); err != nil {
			return events, msg{}, err
		}
	}
	return events, v2Msg(&acc), s.Err()
}

func (c *v2Client) CountTokens(ctx context.Context, text string) (int64, error) {
	n, err := c.cl.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: anthropic.Model(model),
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}})
	if err != nil {
		return 0, err
	}
	return n.InputTokens, nil
}

func v2Batch(b *anthropic.MessageBatch) batch {
	return batch{ID: b.ID, Status: string(b.ProcessingStatus), Succeeded: b.RequestCounts.Succeeded,
		Errored: b.RequestCounts.Errored, Processing: b.RequestCounts.Processing}
}

func (c *v2Client) BatchCreate(ctx context.Context, ids, texts []string) (batch, error) {
	var p anthropic.MessageBatchNewParams
	for i, id := range ids {
		p.Requests = append(p.Requests, anthropic.MessageBatchNewParamsRequest{CustomID: id,
			Params: anthropic.MessageBatchNewParamsRequestParams{Model: anthropic.Model(model), MaxTokens: 64,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(texts[i]))}}})
	}
	b, err := c.cl.Messages.Batches.New(ctx, p)
	if err != nil {
		return batch{}, err
	}
	return v2Batch(b), nil
}

func (c *v2Client) BatchGet(ctx context.Context, id string) (batch, error) {
	b, err := c.cl.Messages.Batches.Get(ctx, id, anthropic.MessageBatchGetParams{})
	if err != nil {
		return batch{}, err
	}
	return v2Batch(b), nil
}

func (c *v2Client) BatchList(ctx context.Context) ([]string, error) {
	p, err := c.cl.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{Limit: anthropic.Int(100)})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, b := range p.Data {
		ids = append(ids, b.ID)
	}
	return ids, nil
}

func (c *v2Client) BatchResults(ctx context.Context, id string) ([]row, error) {
	s := c.cl.Messages.Batches.ResultsStreaming(ctx, id, anthropic.MessageBatchResultsParams{})
	defer s.Close()
	var out []row
	for s.Next() {
		r := s.Current()
		out = append(out, row{CustomID: r.CustomID, Type: r.Result.Type, Text: v2Msg(&r.Result.Message).Text})
	}
	return out, s.Err()
}

func (c *v2Client) APIError(err error) (apiErr, bool) {
	var e *anthropic.Error
	if !errors.As(err, &e) {
		return apiErr{}, false
	}
	out := apiErr{Status: e.StatusCode, Type: string(e.Type()), RequestID: e.RequestID}
	if e.Response != nil {
		out.Header = e.Response.Header
	}
	return out, true
}
