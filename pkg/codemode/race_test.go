//go:build race

package codemode_test

// raceEnabled: the engine is ~77x slower under the race detector, so the hostile tests skip.
const raceEnabled = true
