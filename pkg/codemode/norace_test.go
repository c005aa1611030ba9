//go:build !race

package codemode_test

const raceEnabled = false
