package proxy

// SetStorePutHook makes f run before each virtual batch result line is
// stored (a slow disk), until the test ends.
func SetStorePutHook(cleanup func(func()), f func()) {
	testHookStorePut.Store(&f)
	cleanup(func() { testHookStorePut.Store(nil) })
}
