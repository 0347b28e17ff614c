package sinkkit

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/outbox"
	"github.com/txoutbox/outbox/sink"
)

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"kafka://k1:9092,k2":                        "kafka://k1:9092,k2",
		"amqp://bob:s3cret@h:5672/vh?heartbeat=5":   "amqp://bob:xxxxx@h:5672/vh?...",
		"amqp://bob:s3/c@ret@h/":                    "amqp://bob:xxxxx@h/",
		"amqp://bob:s3c%zzret@h/":                   "amqp://bob:xxxxx@h/",
		"redis://:token@cache/0":                    "redis://:xxxxx@cache/0",
		"nats://t0ken@h":                            "nats://xxxxx@h",
		"nats://u:p@h1:4222,h2:4223":                "nats://u:xxxxx@h1:4222,h2:4223",
		"nats://h1,u:p@h2":                          "nats://h1,u:xxxxx@h2",
		"nats://u:p@h1,nats://v:q@h2?subject=x":     "nats://u:xxxxx@h1,nats://v:xxxxx@h2?...",
		"redis://u:p#w@h":                           "redis://u:xxxxx@h",
		"user:secret@host":                          "user:xxxxx@host",
		"https://h/hook?token=secret#frag":          "https://h/hook?...",
		"https://h/hook#secret":                     "https://h/hook?...",
		"":                                          "",
		"nats://u:p@h/?subject={aggregate_type}.ev": "nats://u:xxxxx@h/?...",
	} {
		if got := RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestInvalid(t *testing.T) {
	err := sink.Invalid("test sink", "bad %s", "thing")
	if !errors.Is(err, outbox.ErrInvalidConfig) || err.Error() != outbox.ErrInvalidConfig.Error()+": test sink: bad thing" {
		t.Errorf("Invalid = %v", err)
	}
	_, err = sink.NewRouterFor("test sink", "{tenant}", nil)
	if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), outbox.ErrInvalidConfig.Error()+": test sink: route template") {
		t.Errorf("NewRouterFor = %v", err)
	}
	_, err = sink.NewRouterFor("test sink", "", map[string]string{"": "x"})
	if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "test sink: route override") {
		t.Errorf("NewRouterFor = %v", err)
	}
}

// read reads every kind of option from the query of raw.
type read struct {
	s      string
	n      int
	n64    int64
	pos    int
	d, pd  time.Duration
	b      bool
	given  map[string]bool
	kept   string
	errMsg string
}

func readAll(raw, query string) read {
	var r read
	q := NewURLOptions("test sink", raw)
	q.Parse(query)
	r.given = map[string]bool{
		"s":   q.String("s", &r.s),
		"n":   q.Int("n", &r.n),
		"n64": q.Int64("n64", &r.n64),
		"pos": q.PositiveInt("pos", &r.pos),
		"d":   q.Duration("d", &r.d),
		"pd":  q.PositiveDuration("pd", &r.pd),
		"b":   q.Bool("b", &r.b),
	}
	r.kept = q.Keep("k1", "k2").Encode()
	if err := q.Err(); err != nil {
		r.errMsg = err.Error()
		if !errors.Is(err, outbox.ErrInvalidConfig) {
			r.errMsg = "not ErrInvalidConfig: " + r.errMsg
		}
	}
	return r
}

func TestURLOptions(t *testing.T) {
	r := readAll("x://h", "s=a%20b&n=-3&n64=9000000000&pos=2&d=-1s&pd=250ms&b=true&k2=v")
	if r.errMsg != "" || r.s != "a b" || r.n != -3 || r.n64 != 9000000000 || r.pos != 2 || r.d != -time.Second ||
		r.pd != 250*time.Millisecond || !r.b || r.kept != "k2=v" {
		t.Fatalf("read %+v", r)
	}
	r = readAll("x://h", "s=&b=false")
	if r.errMsg != "" || !r.given["s"] || !r.given["b"] || r.given["n"] || r.kept != "" {
		t.Fatalf("given: %+v", r)
	}

	for query, want := range map[string]string{
		"n=1.5":          `option n="1.5" is not a whole number`,
		"n64=x":          `option n64="x" is not a whole number`,
		"pos=0":          `option pos="0" is not a positive whole number`,
		"d=soon":         `option d="soon" is not a duration`,
		"pd=0s":          `option pd="0s" is not a positive duration`,
		"b=maybe":        `option b="maybe" is not true or false`,
		"s=a&s=b":        "option s is given 2 times: keep one",
		"k1=a&k1=b":      "option k1 is given 2 times: keep one",
		"z=1&y=2":        `unknown option "y": use s, n, n64, pos, d, pd, b, k1 or k2`,
		"n=x&z=1":        `option n="x" is not a whole number`, // the first problem sticks
		"s=%zz":          "has a malformed query",
		"n=x&d=x&b=x":    `option n="x"`,
		"s=1&pd=-1s&z=1": `option pd="-1s" is not a positive duration`,
	} {
		r := readAll("x://u:s3cret@h?"+query, query)
		if !strings.HasPrefix(r.errMsg, outbox.ErrInvalidConfig.Error()+`: test sink: URL "x://u:xxxxx@h?...": `) || !strings.Contains(r.errMsg, want) {
			t.Errorf("%s: %q, want ErrInvalidConfig saying %q", query, r.errMsg, want)
		}
		if strings.Contains(r.errMsg, "s3cret") {
			t.Errorf("%s: the error quotes the password: %s", query, r.errMsg)
		}
	}
}
