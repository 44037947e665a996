package proxy

// SetStorePutHook makes f run before each virtual batch result line is
// stored (a slow disk), until the test ends.
func SetStorePutHook(cleanup func(func()), f func()) {
	testHookStorePut.Store(&f)
	cleanup(func() { testHookStorePut.Store(nil) })
}

// BatchMemory says what the proxy holds in memory of batch id: whether it
// is registered as live (not archived), whether its rows' state is held,
// and how many custom_ids.
func BatchMemory(p *Proxy, id string) (live, rows bool, ids int) {
	s := &p.batches
	s.mu.Lock()
	b := s.byID[id]
	s.mu.Unlock()
	if b == nil {
		return false, false, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return true, b.rows.Load() != nil, len(b.ids)
}
