package batch

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/call"
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
// counting the comma before it: its custom_id on the wire is the chunk's
// (wireIDLen characters, no escapes), not the request's.
func itemSize(req *call.Request) int64 {
	return int64(len(itemOpen) + wireIDLen + 2 + len(itemMid) + len(req.Body()) + len(itemClose))
}

// A chunk's requests go to the API under custom_ids of the chunk's own —
// "sl" + 12 hex digits of its id's hash + "-" + the request's index, six
// digits — not the caller's. A batch whose create answer was lost is found
// again in the org's list by its request count and creation time, which
// another job's batch can share (the same dataset on another model, a
// colleague's run, another sluice job with the same chunk size); its
// results, read before anything is delivered, prove whose it is: only this
// chunk's batch can hold this chunk's wire ids. The journal keeps the
// prefix, and a chunk journaled before wire ids (no prefix) keeps the
// caller's ids.
const wireIDLen = 2 + 12 + 1 + 6

// wirePrefix is the wire-id prefix of the chunk named id.
func wirePrefix(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "sl" + hex.EncodeToString(sum[:6]) + "-"
}

// wireID is the custom_id the API sees for the chunk's i-th request.
func (c *chunk) wireID(i int) string {
	if c.wire == "" {
		return c.ids[i]
	}
	return c.wire + fmt.Sprintf("%06d", i)
}

// rowID maps a results row's custom_id back to the caller's id of the
// chunk's request, and reports false for an id the chunk never sent.
func (c *chunk) rowID(custom string) (string, bool) {
	if c.wire == "" {
		_, ok := c.index[custom]
		return custom, ok
	}
	if len(custom) != wireIDLen || !strings.HasPrefix(custom, c.wire) {
		return "", false
	}
	i, err := strconv.Atoi(custom[len(c.wire):])
	if err != nil || i < 0 || i >= len(c.ids) {
		return "", false
	}
	return c.ids[i], true
}

// fit returns how many requests from the front of reqs go into one chunk of
// at most maxN requests and maxBytes body bytes, and the body size. The
// first request is always taken: a request too large for any chunk is
// refused before it is queued (see tooLarge).
func fit(reqs []*call.Request, sizes []int64, maxN int, maxBytes int64) (n int, body int64) {
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
func buildBody(reqs []*call.Request, size int64, wireID func(int) string) []byte {
	b := make([]byte, 0, size)
	b = append(b, bodyOpen...)
	for i, r := range reqs {
		if i > 0 {
			b = append(b, ',')
		}
		id, _ := json.Marshal(wireID(i))
		b = append(b, itemOpen...)
		b = append(b, id...)
		b = append(b, itemMid...)
		b = append(b, r.Body()...)
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
