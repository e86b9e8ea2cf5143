package httpurl

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for raw, ok := range map[string]bool{
		"http://127.0.0.1:9000/hook": true,
		"https://example.com":        true,
		"ftp://example.com":          false,
		"example.com":                false,
		"http://":                    false,
		"http://[::1":                false,
		"":                           false,
	} {
		_, err := Parse(raw)
		if (err == nil) != ok {
			t.Errorf("Parse(%q) error = %v, want ok=%v", raw, err, ok)
		}
	}
}

func TestParseBase(t *testing.T) {
	for raw, want := range map[string]error{
		"http://127.0.0.1:7300":  nil,
		"http://127.0.0.1:7300/": nil,
		"https://cp.example":     nil,
		"http://127.0.0.1/x":     ErrNotBase,
		"http://127.0.0.1/?a=b":  ErrNotBase,
		"nats://127.0.0.1:4222":  ErrNotHTTP,
		"127.0.0.1:7300":         ErrNotHTTP,
	} {
		if _, err := ParseBase(raw); !errors.Is(err, want) {
			t.Errorf("ParseBase(%q) error = %v, want %v", raw, err, want)
		}
	}
}
