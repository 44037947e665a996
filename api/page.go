package api

import (
	"errors"
	"net/url"
	"strconv"
)

// Paginate cuts items (in list order) by the list endpoints' cursor
// parameters — limit (1–1000, default 20), after_id, before_id — as the API
// pages Message Batches. id names an item. Data is a copy, never nil. The
// error is a 400's message.
func Paginate[T any](q url.Values, items []T, id func(T) string) (Page[T], error) {
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return Page[T]{}, errors.New("limit: Input should be between 1 and 1000")
		}
		limit = n
	}
	after, before := q.Get("after_id"), q.Get("before_id")
	if after != "" && before != "" {
		return Page[T]{}, errors.New("after_id and before_id cannot both be set")
	}
	lo, hi := 0, len(items)
	if after != "" {
		lo = len(items)
		for i, it := range items {
			if id(it) == after {
				lo = i + 1
				break
			}
		}
	}
	if before != "" {
		hi = 0
		for i, it := range items {
			if id(it) == before {
				hi = i
				break
			}
		}
	}
	sel := items[lo:hi]
	var page Page[T]
	if len(sel) > limit {
		page.HasMore = true
		if before != "" {
			sel = sel[len(sel)-limit:]
		} else {
			sel = sel[:limit]
		}
	}
	page.Data = append([]T{}, sel...)
	if len(sel) > 0 {
		first, last := id(sel[0]), id(sel[len(sel)-1])
		page.FirstID, page.LastID = &first, &last
	}
	return page, nil
}
