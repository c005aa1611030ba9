package api_test

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// memNow returns HeapInuse+StackInuse after two collections (the second shrinks the stacks of
// parked goroutines further) and the resident set size.
func memNow() (heap, rss int64) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap = int64(ms.HeapInuse + ms.StackInuse)
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			pages, _ := strconv.ParseInt(f[1], 10, 64)
			rss = pages * int64(os.Getpagesize())
		}
	}
	return heap, rss
}
