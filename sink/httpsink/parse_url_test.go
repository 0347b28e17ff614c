package httpsink

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
)

func fakeEnv(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

func TestParseURLOptions(t *testing.T) {
	t.Parallel()
	env := fakeEnv(map[string]string{"HOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	for _, tc := range []struct {
		raw  string
		want Config
	}{
		{"https://api.example.com/hooks", Config{URL: "https://api.example.com/hooks"}},
		{"http://127.0.0.1:8080/", Config{URL: "http://127.0.0.1:8080/"}},
		{
			"https://api.example.com/hooks?timeout=5s&concurrency=8&sign_secret_env=HOOK_SECRET",
			Config{URL: "https://api.example.com/hooks", Timeout: 5 * time.Second, Concurrency: 8,
				SigningSecret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		},
		{
			// The endpoint's own parameters stay, in their order and encoding.
			"https://api.example.com/hooks?b=2&timeout=1500ms&a=x%20y&tenant=7",
			Config{URL: "https://api.example.com/hooks?b=2&a=x%20y&tenant=7", Timeout: 1500 * time.Millisecond},
		},
		{
			"https://user:pa%40ss@api.example.com/h?deny_private=true&allow_private=1",
			Config{URL: "https://user:pa%40ss@api.example.com/h", DenyPrivate: true, AllowPrivate: true},
		},
		{"https://api.example.com/h?deny_private=false", Config{URL: "https://api.example.com/h"}},
	} {
		got, err := parseURL(tc.raw, env)
		if err != nil {
			t.Errorf("parseURL(%q): %v", tc.raw, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseURL(%q) =\n  %+v\nwant\n  %+v", tc.raw, got, tc.want)
		}
	}
}

func TestParseURLErrors(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-pw"
	env := fakeEnv(map[string]string{"EMPTY": ""})
	for _, tc := range []struct {
		raw, says string
	}{
		{"ftp://host/path", `scheme "ftp"`},
		{"kafka://host:9092", `scheme "kafka"`},
		{"/just/a/path", "scheme"},
		{"https:///path", "no host"},
		{"https://host/?timeout=abc", "timeout=abc"},
		{"https://host/?timeout=-1s", "timeout=-1s"},
		{"https://host/?timeout=0s", "positive duration"},
		{"https://host/?concurrency=0", "concurrency=0"},
		{"https://host/?concurrency=eight", "concurrency=eight"},
		{"https://host/?concurrency=100000", "1 to 1024"},
		{"https://host/?sign_secret_env=", "sign_secret_env is empty"},
		{"https://host/?sign_secret_env=MISSING", "MISSING is unset or empty"},
		{"https://host/?sign_secret_env=EMPTY", "EMPTY is unset or empty"},
		{"https://host/?timeout=1s&timeout=2s", "given twice"},
		{"https://host/?deny_private=maybe", "not a boolean"},
		// An option whose value is not valid escaping is refused, never
		// left in the endpoint's URL (found by FuzzParseURL).
		{"https://0?sign_secret_env=%", "not valid URL escaping"},
		{"https://host/?timeout=5%zz", "not valid URL escaping"},
		{"https://host/?allow_private=true", "set DenyPrivate too"},
		// Credentials in the URL must never come back in the error.
		{"https://user:" + secret + "@host/?timeout=x", "timeout=x"},
		{"ftp://user:" + secret + "@host/", `scheme "ftp"`},
		{"user:" + secret + "@host", "scheme"},
		{"http://user:" + secret + " x@host/", "percent-encoded"},
		{"http://user:" + secret + "/x@host/", "percent-encoded"},
		{"http://user:" + secret + "@host:port/", "percent-encoded"},
		{"http://user:" + secret + "@ho st/", "percent-encoded"},
		{"https://host/hook?token=" + secret + "&timeout=bad", "timeout=bad"},
	} {
		_, err := parseURL(tc.raw, env)
		if err == nil {
			t.Errorf("parseURL(%q) succeeded, want an error saying %q", tc.raw, tc.says)
			continue
		}
		if !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("parseURL(%q) = %v, want it to match outbox.ErrInvalidConfig", tc.raw, err)
		}
		if !strings.Contains(err.Error(), tc.says) {
			t.Errorf("parseURL(%q) = %q, want it to say %q", tc.raw, err, tc.says)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("parseURL(%q) = %q: the error quotes the secret", tc.raw, err)
		}
	}
}

// TestParseURLReadsTheEnvironment runs ParseURL itself; t.Setenv rules out
// t.Parallel.
func TestParseURLReadsTheEnvironment(t *testing.T) {
	t.Setenv("OUTBOX_TEST_HTTPSINK_SECRET", "ZnJvbS10aGUtZW52aXJvbm1lbnQ=")
	cfg, err := ParseURL("https://api.example.com/hooks?sign_secret_env=OUTBOX_TEST_HTTPSINK_SECRET")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SigningSecret != "ZnJvbS10aGUtZW52aXJvbm1lbnQ=" || cfg.URL != "https://api.example.com/hooks" {
		t.Errorf("ParseURL = %+v, want the secret from the environment and the option stripped", cfg)
	}
}

func TestQuoteURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"https://api.example.com/h":                   "https://api.example.com/h",
		"https://u:pw@api.example.com/h?token=t#frag": "https://u:xxxxx@api.example.com/h?...",
		"https://u@api.example.com/h":                 "https://u@api.example.com/h",
		"u:pw@host/x":                                 "u:xxxxx@host/x",
		"http://u:p w@h/?q":                           "http://xxxxx@h/?...",
	} {
		if got := quoteURL(raw); got != want {
			t.Errorf("quoteURL(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	const secret = "Bearer s3cr3t-token"
	for _, tc := range []struct {
		name string
		cfg  Config
		says string
	}{
		{"no URL", Config{}, "URL is required"},
		{"bad scheme", Config{URL: "ws://host/"}, `scheme "ws"`},
		{"negative timeout", Config{URL: "https://h/", Timeout: -time.Second}, "timeout -1s is negative"},
		{"negative concurrency", Config{URL: "https://h/", Concurrency: -1}, "concurrency -1"},
		{"too much concurrency", Config{URL: "https://h/", Concurrency: MaxConcurrency + 1}, "1 to 1024"},
		{"allow without deny", Config{URL: "https://h/", AllowPrivate: true}, "set DenyPrivate too"},
		{"deny with own client", Config{URL: "https://h/", DenyPrivate: true, Client: &http.Client{}}, "leave Client nil"},
		{"bad header name", Config{URL: "https://h/", Headers: map[string]string{"Bad Name": "x"}}, `"Bad Name"`},
		{"reserved header", Config{URL: "https://h/", Headers: map[string]string{"idempotency-key": "x"}}, "Idempotency-Key"},
		{"outbox header", Config{URL: "https://h/", Headers: map[string]string{"Outbox-Attempt": "x"}}, "Outbox-Attempt"},
		{"content type", Config{URL: "https://h/", Headers: map[string]string{"Content-Type": "text/plain"}}, "Content-Type"},
		{"user agent", Config{URL: "https://h/", Headers: map[string]string{"User-Agent": "x"}}, "Config.UserAgent"},
		{"bad header value", Config{URL: "https://h/", Headers: map[string]string{"Authorization": secret + "\n"}}, `"Authorization"`},
		{"bad user agent", Config{URL: "https://h/", UserAgent: "a\nb"}, "UserAgent"},
	} {
		_, err := New(tc.cfg)
		switch {
		case err == nil:
			t.Errorf("%s: New succeeded, want an error saying %q", tc.name, tc.says)
		case !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.says):
			t.Errorf("%s: New = %q, want ErrInvalidConfig saying %q", tc.name, err, tc.says)
		case strings.Contains(err.Error(), secret):
			t.Errorf("%s: New = %q quotes a header value", tc.name, err)
		}
	}
}

func TestNewAppliesDefaults(t *testing.T) {
	t.Parallel()
	s, err := New(Config{URL: "https://api.example.com/hook#frag"})
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.Timeout != DefaultTimeout || s.cfg.Concurrency != DefaultConcurrency || s.cfg.UserAgent != DefaultUserAgent || cap(s.sem) != DefaultConcurrency {
		t.Errorf("defaults not applied: %+v", s.cfg)
	}
	if s.target != "https://api.example.com/hook" {
		t.Errorf("target = %q, want the URL without its fragment", s.target)
	}
	if s.client.CheckRedirect == nil {
		t.Error("the default client follows redirects")
	}
}
