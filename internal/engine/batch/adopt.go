package batch

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/keys"
)

// verifyAdopted reads an adopted batch's whole results file before any row
// is handed over. A batch found in the org's list may be another job's —
// the same dataset on another model, a colleague's run, another sluice job
// in the workspace — with the same request count and the same custom_ids.
// It is this chunk's only if its rows are exactly the chunk's custom_ids,
// each once, and every answer is from the model its request asked for
// (where the request is known to this run: in c's body, or in models, the
// loop's attached requests when the step started). why is empty when it is
// ours. Runs in a step.
func (r *Runner) verifyAdopted(ctx context.Context, c *chunk, key *keys.Key, models map[string]string) (why string, err error) {
	seen := make(map[string]bool, c.n())
	err = r.eachResultLine(ctx, c, key, func(line []byte, complete, _ bool) (bool, error) {
		var row resultRow
		if err := json.Unmarshal(line, &row); err != nil || row.CustomID == "" {
			if !complete {
				// A line cut by the read (EOF, a cut connection, a
				// timeout, Ctrl-C) says nothing about the batch: download
				// it again.
				return false, fmt.Errorf("batch: results of %s cut in a line", c.batch)
			}
			why = fmt.Sprintf("a results line is not a result: %.80q", line)
			return true, nil
		}
		id, ok := c.rowID(row.CustomID)
		i := c.index[id]
		switch {
		case !ok:
			why = fmt.Sprintf("custom_id %q is not one this chunk sent", row.CustomID)
			return true, nil
		case seen[id]:
			why = fmt.Sprintf("custom_id %q appears twice", id)
			return true, nil
		}
		seen[id] = true
		if row.Result.Type == api.ResultSucceeded {
			got := messageModel(row.Result.Message)
			if want := requestModel(c, i, id, models); want != "" && !sameModel(want, got) {
				why = fmt.Sprintf("custom_id %q was answered by %q, its request asked for %q", id, got, want)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil || why != "" {
		return why, err
	}
	if len(seen) != c.n() {
		return fmt.Sprintf("%d of the chunk's %d custom_ids are in its results", len(seen), c.n()), nil
	}
	return "", nil
}

// messageModel is a Message's model field ("" when it has none).
func messageModel(msg json.RawMessage) string {
	var m struct {
		Model string `json:"model"`
	}
	json.Unmarshal(msg, &m)
	return m.Model
}

// requestModel is the model the request with custom_id id (position i in
// the chunk) asked for; "" when this run does not hold the request (a
// resumed chunk's id not submitted yet).
func requestModel(c *chunk, i int, id string, models map[string]string) string {
	if i < len(c.list) && c.list[i] != nil && c.list[i].ID == id {
		return c.list[i].Model
	}
	return models[id]
}

// sameModel reports whether an answer's model is the one asked for: the
// same catalog entry (an alias answers with its dated id), else, for
// names the catalog does not know, the same family (or, without one, one
// name a prefix of the other). Lenient on purpose:
// a false "different" costs a chunk paid twice, never a wrong result.
func sameModel(asked, answered string) bool {
	if asked == answered {
		return true
	}
	a, okA := api.LookupModel(asked)
	b, okB := api.LookupModel(answered)
	if okA && okB {
		return a.ID == b.ID
	}
	fa, fb := api.FamilyOf(asked), api.FamilyOf(answered)
	if fa == api.FamilyUnknown || fb == api.FamilyUnknown {
		// No family to go by: an alias is a prefix of the dated id.
		return strings.HasPrefix(answered, asked) || strings.HasPrefix(asked, answered)
	}
	return fa == fb
}
