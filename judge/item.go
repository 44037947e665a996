package judge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluice-dev/sluice/api"
)

// Item is one thing to judge: an id (the request's custom_id), the fields
// the template uses, and the groups the summary counts it in.
//
// Its JSON form is one flat object per line of an items file:
//
//	{"id": "q17-a", "question": "…", "completion": "…", "groups": ["persona-a"]}
//
// "id" is required; "groups" is an array of labels (or "group", one label);
// every other key is a field. A string field is taken as is; any other
// value (a number, an object) as its compact JSON text; null as "".
type Item struct {
	ID     string
	Fields map[string]string
	Groups []string
}

// Validate reports whether it can be judged: its ID must be a valid
// custom_id (^[a-zA-Z0-9_-]{1,64}$) and its group labels non-empty.
func (it Item) Validate() error {
	if !api.ValidCustomID(it.ID) {
		return fmt.Errorf("judge: item id %q must match ^[a-zA-Z0-9_-]{1,64}$", it.ID)
	}
	for _, g := range it.Groups {
		if g == "" {
			return fmt.Errorf("judge: item %q has an empty group label", it.ID)
		}
	}
	return nil
}

// UnmarshalJSON reads the flat form described on Item.
func (it *Item) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("judge: an item must be a JSON object: %w", err)
	}
	if raw == nil {
		return errors.New("judge: an item must be a JSON object, got null")
	}
	*it = Item{Fields: make(map[string]string, len(raw))}
	idRaw, ok := raw["id"]
	if !ok {
		return errors.New(`judge: item has no "id"`)
	}
	if err := json.Unmarshal(idRaw, &it.ID); err != nil {
		return fmt.Errorf(`judge: item "id" must be a string, got %s`, idRaw)
	}
	if g, ok := raw["groups"]; ok {
		if err := json.Unmarshal(g, &it.Groups); err != nil {
			return fmt.Errorf(`judge: item %q: "groups" must be an array of strings, got %s`, it.ID, g)
		}
	}
	if g, ok := raw["group"]; ok {
		var label string
		if err := json.Unmarshal(g, &label); err != nil {
			return fmt.Errorf(`judge: item %q: "group" must be a string, got %s`, it.ID, g)
		}
		it.Groups = append(it.Groups, label)
	}
	for k, v := range raw {
		if k == "id" || k == "groups" || k == "group" {
			continue
		}
		var s string
		switch {
		case json.Unmarshal(v, &s) == nil:
		case bytes.Equal(v, []byte("null")):
		default:
			var c bytes.Buffer
			if err := json.Compact(&c, v); err != nil {
				return fmt.Errorf("judge: item %q field %q: %w", it.ID, k, err)
			}
			s = c.String()
		}
		it.Fields[k] = s
	}
	return nil
}

// MarshalJSON writes the flat form described on Item.
func (it Item) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(it.Fields)+2)
	for k, v := range it.Fields {
		m[k] = v
	}
	m["id"] = it.ID
	if len(it.Groups) > 0 {
		m["groups"] = it.Groups
	}
	return json.Marshal(m)
}
