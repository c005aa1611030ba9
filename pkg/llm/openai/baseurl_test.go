package openai_test

import (
	"errors"
	"testing"

	"github.com/dshd/dshd/pkg/llm/openai"
)

func TestAllowedBaseURL(t *testing.T) {
	t.Parallel()
	deepseek := []string{"api.deepseek.com"}
	for _, tc := range []struct {
		raw   string
		hosts []string
		want  string // the normalized URL; "" when rejected
		err   error  // when rejected
	}{
		{"https://api.deepseek.com/v1", deepseek, "https://api.deepseek.com/v1", nil},
		{"https://api.deepseek.com", deepseek, "https://api.deepseek.com", nil},
		{"https://API.DeepSeek.COM/v1", deepseek, "https://api.deepseek.com/v1", nil},
		{"https://api.deepseek.com./v1", deepseek, "https://api.deepseek.com/v1", nil},
		{"https://api.deepseek.com:443/v1", deepseek, "https://api.deepseek.com/v1", nil},
		{"https://api.deepseek.com:0443", deepseek, "https://api.deepseek.com", nil},
		{"https://api.deepseek.com:/v1", deepseek, "https://api.deepseek.com/v1", nil},
		{"http://api.deepseek.com/v1", deepseek, "http://api.deepseek.com/v1", nil},
		{"http://api.deepseek.com:80/v1", deepseek, "http://api.deepseek.com/v1", nil},
		{"https://api.deepseek.com:8443/v1", deepseek, "", openai.ErrHostNotAllowed},
		{"http://api.deepseek.com:443/v1", deepseek, "", openai.ErrHostNotAllowed},
		{"https://api.deepseek.com.evil.example/v1", deepseek, "", openai.ErrHostNotAllowed},
		{"https://evil.example/api.deepseek.com", deepseek, "", openai.ErrHostNotAllowed},
		// Userinfo is never read as a host, and is rejected even where the host would be allowed.
		{"https://api.deepseek.com@evil.example/v1", deepseek, "", openai.ErrBaseURLInvalid},
		{"https://user:pw@api.deepseek.com/v1", deepseek, "", openai.ErrBaseURLInvalid},
		{"https://evil.example@api.deepseek.com/v1", []string{"*"}, "", openai.ErrBaseURLInvalid},
		{"https://api.deepseek.com/v1?x=1", deepseek, "", openai.ErrBaseURLInvalid},
		{"https://api.deepseek.com/v1?", deepseek, "", openai.ErrBaseURLInvalid},
		{"https://api.deepseek.com/v1#frag", deepseek, "", openai.ErrBaseURLInvalid},
		{"ftp://api.deepseek.com", deepseek, "", openai.ErrBaseURLInvalid},
		{"file:///etc/passwd", []string{"*"}, "", openai.ErrBaseURLInvalid},
		{"/v1", deepseek, "", openai.ErrBaseURLInvalid},
		{"api.deepseek.com/v1", deepseek, "", openai.ErrBaseURLInvalid},
		{"https:api.deepseek.com", deepseek, "", openai.ErrBaseURLInvalid},
		{"https://api.deepseek.com:99999/v1", deepseek, "", openai.ErrBaseURLInvalid},
		{"https://%61pi.deepseek.com/", deepseek, "", openai.ErrBaseURLInvalid},
		// An entry without a port is the scheme's default port only.
		{"http://localhost/v1", []string{"localhost"}, "http://localhost/v1", nil},
		{"https://localhost/v1", []string{"localhost"}, "https://localhost/v1", nil},
		{"http://localhost:8080/v1", []string{"localhost"}, "", openai.ErrHostNotAllowed},
		{"http://localhost:8080/v1", []string{"localhost:8080"}, "http://localhost:8080/v1", nil},
		{"http://LOCALHOST.:8080/v1", []string{"Localhost:8080"}, "http://localhost:8080/v1", nil},
		{"http://localhost/v1", []string{"localhost:8080"}, "", openai.ErrHostNotAllowed},
		{"http://localhost:80/v1", []string{"localhost:80"}, "http://localhost/v1", nil},
		{"http://127.0.0.1:9000/v1", []string{"127.0.0.1"}, "", openai.ErrHostNotAllowed},
		{"http://127.0.0.1:9000/v1", []string{"127.0.0.1:9000"}, "http://127.0.0.1:9000/v1", nil},
		{"http://169.254.169.254/latest", deepseek, "", openai.ErrHostNotAllowed},
		// IPv6 literals: canonical form, brackets in entries optional without a port.
		{"http://[::1]/v1", []string{"::1"}, "http://[::1]/v1", nil},
		{"http://[::1]/v1", []string{"[::1]"}, "http://[::1]/v1", nil},
		{"http://[0:0::1]:8080/v1", []string{"[::1]:8080"}, "http://[::1]:8080/v1", nil},
		{"http://[::1]:8080/v1", []string{"::1"}, "", openai.ErrHostNotAllowed},
		{"http://[::1]:8080/v1", []string{"[::1]"}, "", openai.ErrHostNotAllowed},
		{"http://[::ffff:127.0.0.1]/v1", []string{"127.0.0.1"}, "", openai.ErrHostNotAllowed},
		{"http://[fe80::1%25eth0]/v1", []string{"*"}, "", openai.ErrBaseURLInvalid},
		{"http://[::1/v1", []string{"*"}, "", openai.ErrBaseURLInvalid},
		// "*" allows any host, but the URL must still be well-formed.
		{"http://10.0.0.7:1234/v1/", []string{"*"}, "http://10.0.0.7:1234/v1/", nil},
		{"http://evil.example/v1", nil, "", openai.ErrHostNotAllowed},
	} {
		u, err := openai.AllowedBaseURL(tc.raw, tc.hosts)
		if tc.want == "" {
			if u != nil || !errors.Is(err, tc.err) {
				t.Errorf("AllowedBaseURL(%q, %q) = %v, %v; want %v", tc.raw, tc.hosts, u, err, tc.err)
			}
			continue
		}
		if err != nil || u.String() != tc.want {
			t.Errorf("AllowedBaseURL(%q, %q) = %v, %v; want %s", tc.raw, tc.hosts, u, err, tc.want)
		}
	}
}

func TestIsDeepSeekEndpoint(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]bool{
		"https://api.deepseek.com":          true,
		"https://api.deepseek.com/v1":       true,
		"https://API.deepseek.com.:443/v1":  true,
		"http://api.deepseek.com":           false,
		"https://api.deepseek.com:8443":     false,
		"https://api.deepseek.com.evil.com": false,
		"https://deepseek.com":              false,
		"https://evil.example":              false,
	} {
		u, err := openai.AllowedBaseURL(raw, []string{"*"})
		if err != nil {
			t.Fatal(err)
		}
		if got := openai.IsDeepSeekEndpoint(u); got != want {
			t.Errorf("IsDeepSeekEndpoint(%s) = %v, want %v", raw, got, want)
		}
	}
	if openai.IsDeepSeekEndpoint(nil) {
		t.Error("nil is DeepSeek")
	}
}
