package api

import "testing"

// TestRatePolicy: RateLimit-Policy states the real rate (requests per window) and the burst,
// never more requests than the limiter allows.
func TestRatePolicy(t *testing.T) {
	for _, c := range []struct {
		rate  float64
		burst int
		want  string
	}{
		{20, 10, "20;w=1;burst=10"},
		{0.2, 2, "1;w=5;burst=2"},
		{2.5, 1, "5;w=2;burst=1"},
		{0.001, 1, "1;w=1000;burst=1"},
		{1_000_000, 1_000_000, "1000000;w=1;burst=1000000"},
		{1.0 / 3, 4, "1;w=3;burst=4"},
		{0.0003, 1, "1;w=3334;burst=1"},
	} {
		if got := ratePolicy(c.rate, c.burst); got != c.want {
			t.Errorf("%v/s, burst %d: %q, want %q", c.rate, c.burst, got, c.want)
		}
	}
}
