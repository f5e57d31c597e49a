//go:build race

package signing

// raceEnabled: the race detector makes sync.Pool drop some of what is put
// back, so allocation counts are not exact.
const raceEnabled = true
