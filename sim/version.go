package sim

import (
	"encoding/json"
	"fmt"

	"github.com/sluice-dev/sluice/api"
)

// What an API version and a model refuse (versioning page, models overview
// page; the rules are the model table's, docs/models.md): the simulator
// answers such a request with the API's 400, so a client that does not
// check before sending learns it line by line, as it would from the API.

// saw counts one authenticated call's version and workspace.
func (o *org) saw(version, workspace string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counters.Versions == nil {
		o.counters.Versions, o.counters.Workspaces = map[string]int64{}, map[string]int64{}
	}
	o.counters.Versions[version]++
	o.counters.Workspaces[workspace]++
}

// versionRefusal returns the 400 for what version refuses of p, or nil.
func versionRefusal(version string, p *prompt) *requestError {
	r := api.Current().Rules(version, p.model)
	q := &p.req
	sampling := []struct {
		name    string
		present bool
		def     bool
	}{
		{"temperature", q.Temperature != nil, q.Temperature != nil && *q.Temperature == 1},
		{"top_p", q.TopP != nil, q.TopP != nil && *q.TopP == 1},
		{"top_k", q.TopK != nil, false},
	}
	for _, f := range sampling {
		switch {
		case !f.present:
		case r.Sampling == api.SamplingRefused:
			return badRequest("%s: Extra inputs are not permitted", f.name)
		case r.Sampling == api.SamplingDefaultOnly && !f.def:
			return badRequest("%s: %s does not support setting %s to a non-default value", f.name, p.model, f.name)
		}
	}
	if !r.NoAssistantDocuments && !r.NoUserCitations {
		return nil
	}
	for i, m := range q.Messages {
		var blocks []struct {
			Type      string            `json:"type"`
			Citations []json.RawMessage `json:"citations"`
		}
		if len(m.Content) == 0 || m.Content[0] != '[' || json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for j, b := range blocks {
			if r.NoAssistantDocuments && m.Role == "assistant" && b.Type == "document" {
				return badRequest("messages.%d.content.%d: document blocks are not allowed in assistant messages", i, j)
			}
			if r.NoUserCitations && m.Role == "user" && b.Type == "text" && len(b.Citations) > 0 {
				return badRequest("%s", fmt.Sprintf("messages.%d.content.%d.citations: citations are not allowed on user text blocks", i, j))
			}
		}
	}
	return nil
}
