package results

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/sluice-dev/sluice/api"
)

// encode returns rec as one JSON line ending in '\n', as a json.Encoder
// with HTML escaping off writes it (the result compacted), or an error
// naming what is wrong with a result that is not JSON.
func encode(rec api.ResultRecord) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		if !json.Valid(rec.Result) {
			// The decoder's reason, not the encoder's wrapping of it.
			return nil, fmt.Errorf("the result is not valid JSON: %w", json.Unmarshal(rec.Result, new(any)))
		}
		return nil, err
	}
	return buf.Bytes(), nil
}
