package batch

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/sluice-dev/sluice/dispatch"
)

// The create body is {"requests":[item,item,…]} with each item
// {"custom_id":"…","params":…}: its size is known exactly before it is
// built, so a chunk is cut by the bytes the API will count.
const (
	bodyOpen  = `{"requests":[`
	bodyClose = `]}`
	itemOpen  = `{"custom_id":`
	itemMid   = `,"params":`
	itemClose = `}`
	// envelope is what a body holds besides its items and their commas.
	envelope = len(bodyOpen) + len(bodyClose)
)

// itemSize is the exact number of bytes req adds to a create body, not
// counting the comma before it.
func itemSize(req *dispatch.Request) int64 {
	id, _ := json.Marshal(req.ID)
	return int64(len(itemOpen) + len(id) + len(itemMid) + len(req.Params) + len(itemClose))
}

// fit returns how many requests from the front of reqs go into one chunk of
// at most maxN requests and maxBytes body bytes, and the body size. The
// first request is always taken: a request too large for any chunk is
// refused before it is queued (see tooLarge).
func fit(reqs []*dispatch.Request, sizes []int64, maxN int, maxBytes int64) (n int, body int64) {
	body = int64(envelope)
	for n < len(reqs) && n < maxN {
		add := sizes[n]
		if n > 0 {
			add++ // the comma
		}
		if n > 0 && body+add > maxBytes {
			break
		}
		body += add
		n++
	}
	return n, body
}

// buildBody renders the create body of reqs, byte for byte what fit
// measured. Params are sent as they came.
func buildBody(reqs []*dispatch.Request, size int64) []byte {
	b := make([]byte, 0, size)
	b = append(b, bodyOpen...)
	for i, r := range reqs {
		if i > 0 {
			b = append(b, ',')
		}
		id, _ := json.Marshal(r.ID)
		b = append(b, itemOpen...)
		b = append(b, id...)
		b = append(b, itemMid...)
		b = append(b, r.Params...)
		b = append(b, itemClose...)
	}
	return append(b, bodyClose...)
}

// chunkHash fingerprints a chunk: its custom_ids and params hashes, in
// order. The journal stores it with the intent so a damaged record is
// recognised on resume.
func chunkHash(ids, params []string) string {
	h := sha256.New()
	for i, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
		h.Write([]byte(params[i]))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}
