package api

import (
	"fmt"
	"net/url"
	"testing"
)

func TestPaginate(t *testing.T) {
	var items []string
	for i := range 50 {
		items = append(items, fmt.Sprintf("b%02d", i))
	}
	id := func(s string) string { return s }
	for _, tt := range []struct {
		q           string
		first, last string
		n           int
		more        bool
	}{
		{"", "b00", "b19", 20, true},
		{"limit=50", "b00", "b49", 50, false},
		{"after_id=b19&limit=5", "b20", "b24", 5, true},
		{"after_id=b45", "b46", "b49", 4, false},
		{"before_id=b10&limit=3", "b07", "b09", 3, true},
		{"before_id=b02", "b00", "b01", 2, false},
	} {
		q, _ := url.ParseQuery(tt.q)
		p, err := Paginate(q, items, id)
		if err != nil || len(p.Data) != tt.n || p.HasMore != tt.more || *p.FirstID != tt.first || *p.LastID != tt.last {
			t.Errorf("%q: %d items %v…%v more %v, err %v", tt.q, len(p.Data), p.FirstID, p.LastID, p.HasMore, err)
		}
	}
	q, _ := url.ParseQuery("after_id=unknown")
	if p, err := Paginate(q, items, id); err != nil || p.Data == nil || len(p.Data) != 0 || p.FirstID != nil {
		t.Errorf("after an unknown id: %+v, %v", p, err)
	}
	for _, bad := range []string{"limit=0", "limit=1001", "limit=x", "after_id=b01&before_id=b05"} {
		q, _ := url.ParseQuery(bad)
		if _, err := Paginate(q, items, id); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
