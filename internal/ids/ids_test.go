package ids

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for id, ok := range map[string]bool{
		"orders":                true,
		"acme_Co-7":             true,
		"":                      false,
		"a.b":                   false,
		"a b":                   false,
		"ü":                     false,
		strings.Repeat("x", 64): true,
		strings.Repeat("x", 65): false,
	} {
		err := Validate("destination id", id)
		if (err == nil) != ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", id, err, ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "destination id") {
			t.Errorf("error %q does not name the field", err)
		}
	}
}
