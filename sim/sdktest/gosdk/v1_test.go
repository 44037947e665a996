package gosdk_test

import (
	"context"
	"errors"
	"net/http"
	"strings"

	anthropic "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
)

// v1Line is github.com/anthropics/anthropic-sdk-go v1.84.0: x-api-key and
// anthropic-version 2023-06-01.
type v1Line struct{}

func (v1Line) Name() string    { return "v1" }
func (v1Line) Version() string { return "2023-06-01" }

func (v1Line) Connect(baseURL, key string, retries int) client {
	cl := anthropic.NewClient(
		option.WithoutEnvironmentDefaults(), // ignore ANTHROPIC_* and profile files
		option.WithBaseURL(baseURL),
		option.WithAPIKey(key),
		option.WithMaxRetries(retries),
		option.WithHTTPClient(&http.Client{}),
	)
	return &v1Client{cl: cl}
}

type v1Client struct{ cl anthropic.Client }

func v1Messages(ts []turn) []anthropic.MessageParam {
	out := make([]anthropic.MessageParam, 0, len(ts))
	for _, t := range ts {
		// v1 types the role as a string enum that includes "system".
		out = append(out, anthropic.MessageParam{
			Role:    anthropic.MessageParamRole(t.Role),
			Content: []anthropic.ContentBlockParamUnion{anthropic.NewTextBlock(t.Text)},
		})
	}
	return out
}

func v1Params(r msgReq) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: anthropic.Model(r.Model), MaxTokens: r.MaxTokens, Messages: v1Messages(r.Turns)}
}

func v1Msg(m *anthropic.Message) msgOut {
	var text strings.Builder
	missing := append(missingRequired(*m, ""), missingRequired(m.Usage, "usage.")...)
	for _, b := range m.Content {
		if b.Type == "text" {
			text.WriteString(b.Text)
			missing = append(missing, missingRequired(b.AsText(), "content.text.")...)
		}
	}
	return msgOut{
		ID: m.ID, Model: string(m.Model), Text: text.String(), StopReason: string(m.StopReason),
		ServiceTier: string(m.Usage.ServiceTier), InputTokens: m.Usage.InputTokens, OutputTokens: m.Usage.OutputTokens,
		Missing: uniq(missing),
	}
}

func (c *v1Client) Message(ctx context.Context, r msgReq) (msgOut, error) {
	var resp *http.Response
	m, err := c.cl.Messages.New(ctx, v1Params(r), option.WithResponseInto(&resp))
	if err != nil {
		return msgOut{}, err
	}
	out := v1Msg(m)
	out.Header = resp.Header
	return out, nil
}

func (c *v1Client) Stream(ctx context.Context, r msgReq) (streamOut, error) {
	var resp *http.Response
	s := c.cl.Messages.NewStreaming(ctx, v1Params(r), option.WithResponseInto(&resp))
	defer s.Close()
	var out streamOut
	acc := anthropic.Message{}
	for s.Next() {
		ev := s.Current()
		out.Events = append(out.Events, ev.Type)
		if err := acc.Accumulate(ev); err != nil {
			return out, err
		}
	}
	if resp != nil {
		out.Header = resp.Header
	}
	if err := s.Err(); err != nil {
		return out, err
	}
	out.Msg = v1Msg(&acc)
	return out, nil
}

func (c *v1Client) CountTokens(ctx context.Context, r msgReq) (int64, http.Header, error) {
	var resp *http.Response
	n, err := c.cl.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model: anthropic.Model(r.Model), Messages: v1Messages(r.Turns),
	}, option.WithResponseInto(&resp))
	if err != nil {
		return 0, nil, err
	}
	return n.InputTokens, resp.Header, nil
}

func v1Batch(b *anthropic.MessageBatch) batchOut {
	rc := b.RequestCounts
	return batchOut{
		ID: b.ID, Type: string(b.Type), Status: string(b.ProcessingStatus), ResultsURL: b.ResultsURL,
		Counts:    counts{rc.Processing, rc.Succeeded, rc.Errored, rc.Canceled, rc.Expired},
		CreatedAt: b.CreatedAt, ExpiresAt: b.ExpiresAt, EndedAt: b.EndedAt, CancelInitiatedAt: b.CancelInitiatedAt,
		Missing: append(missingRequired(*b, ""), missingRequired(rc, "request_counts.")...),
	}
}

func (c *v1Client) BatchCreate(ctx context.Context, reqs []batchReq) (batchOut, error) {
	var p anthropic.MessageBatchNewParams
	for _, r := range reqs {
		p.Requests = append(p.Requests, anthropic.MessageBatchNewParamsRequest{
			CustomID: r.CustomID,
			Params: anthropic.MessageBatchNewParamsRequestParams{
				Model: anthropic.Model(r.Params.Model), MaxTokens: r.Params.MaxTokens, Messages: v1Messages(r.Params.Turns),
			},
		})
	}
	var resp *http.Response
	b, err := c.cl.Messages.Batches.New(ctx, p, option.WithResponseInto(&resp))
	if err != nil {
		return batchOut{}, err
	}
	out := v1Batch(b)
	out.Header = resp.Header
	return out, nil
}

func (c *v1Client) BatchGet(ctx context.Context, id string) (batchOut, error) {
	b, err := c.cl.Messages.Batches.Get(ctx, id, anthropic.MessageBatchGetParams{})
	if err != nil {
		return batchOut{}, err
	}
	return v1Batch(b), nil
}

func (c *v1Client) BatchList(ctx context.Context) (batchPage, error) {
	p, err := c.cl.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{Limit: anthropic.Int(100)})
	if err != nil {
		return batchPage{}, err
	}
	out := batchPage{HasMore: p.HasMore, FirstID: p.FirstID, LastID: p.LastID}
	for i := range p.Data {
		out.Data = append(out.Data, v1Batch(&p.Data[i]))
	}
	return out, nil
}

func (c *v1Client) BatchCancel(ctx context.Context, id string) (batchOut, error) {
	b, err := c.cl.Messages.Batches.Cancel(ctx, id, anthropic.MessageBatchCancelParams{})
	if err != nil {
		return batchOut{}, err
	}
	return v1Batch(b), nil
}

func (c *v1Client) BatchDelete(ctx context.Context, id string) (batchOut, error) {
	d, err := c.cl.Messages.Batches.Delete(ctx, id, anthropic.MessageBatchDeleteParams{})
	if err != nil {
		return batchOut{}, err
	}
	return batchOut{ID: d.ID, Type: string(d.Type), Missing: missingRequired(*d, "")}, nil
}

func (c *v1Client) BatchResults(ctx context.Context, id string) ([]resultOut, error) {
	s := c.cl.Messages.Batches.ResultsStreaming(ctx, id, anthropic.MessageBatchResultsParams{})
	defer s.Close()
	var out []resultOut
	for s.Next() {
		r := s.Current()
		o := resultOut{CustomID: r.CustomID, Type: r.Result.Type}
		switch r.Result.Type {
		case "succeeded":
			m := v1Msg(&r.Result.Message)
			o.Text, o.ServiceTier, o.InputTokens, o.OutputTok = m.Text, m.ServiceTier, m.InputTokens, m.OutputTokens
			o.Missing = m.Missing
		case "errored":
			o.ErrType = r.Result.Error.Error.Type
		}
		out = append(out, o)
	}
	return out, s.Err()
}

func (c *v1Client) APIError(err error) (apiErr, bool) {
	var e *anthropic.Error
	if !errors.As(err, &e) {
		return apiErr{}, false
	}
	raw := e.RawJSON()
	out := apiErr{
		Status: e.StatusCode, Type: string(e.Type()), RequestID: e.RequestID, Raw: raw,
		Message: messageOf(raw), ErrorCode: errorCodeOf(raw),
	}
	if e.Response != nil {
		out.Header = e.Response.Header
	}
	return out, true
}
