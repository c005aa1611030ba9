//go:build race

package api_test

// raceEnabled reports that the tests run with -race, which inflates stacks and heap.
const raceEnabled = true
