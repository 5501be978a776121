package migrations

// ConcurrentIndexes exposes the marked indexes to the tests.
var ConcurrentIndexes = concurrentIndexes

// OnBuild exposes the build hook to the tests.
func OnBuild(f func(name string, concurrently bool)) {
	if f == nil {
		onBuild.Store(nil)
		return
	}
	onBuild.Store(&f)
}
