package main

import (
	"slices"
	"time"
)

// Latency summarises a set of turn durations.
type Latency struct {
	N    int           `json:"n"`
	Mean time.Duration `json:"meanNs"`
	P50  time.Duration `json:"p50Ns"`
	P90  time.Duration `json:"p90Ns"`
	P99  time.Duration `json:"p99Ns"`
	Max  time.Duration `json:"maxNs"`
}

// Summarize returns the mean, the 50th, 90th and 99th percentiles (nearest rank) and the maximum of ds.
// It does not modify ds. An empty ds gives the zero Latency.
func Summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Latency{N: len(s), Mean: sum / time.Duration(len(s)), P50: percentile(s, 50), P90: percentile(s, 90), P99: percentile(s, 99), Max: s[len(s)-1]}
}

// percentile returns the nearest-rank p-th percentile of the sorted, non-empty s.
func percentile(s []time.Duration, p int) time.Duration {
	rank := (p*len(s) + 99) / 100 // ceil(p/100 * n)
	if rank < 1 {
		rank = 1
	}
	return s[rank-1]
}
