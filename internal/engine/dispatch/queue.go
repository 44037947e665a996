package dispatch

// fifo is a double-ended queue of items; retries go to the front.
type fifo struct {
	items []*item
	head  int
}

func (q *fifo) len() int { return len(q.items) - q.head }

func (q *fifo) push(it *item) { q.items = append(q.items, it) }

func (q *fifo) pushFront(it *item) {
	if q.head > 0 {
		q.head--
		q.items[q.head] = it
		return
	}
	q.items = append([]*item{it}, q.items...)
}

func (q *fifo) peek() *item { return q.items[q.head] }

func (q *fifo) pop() *item {
	it := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head > 1024 && q.head*2 > len(q.items) {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	return it
}

// retryHeap orders waiting retries by due time.
type retryHeap []*item

func (h retryHeap) Len() int           { return len(h) }
func (h retryHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h retryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *retryHeap) Push(x any)        { *h = append(*h, x.(*item)) }
func (h *retryHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}
