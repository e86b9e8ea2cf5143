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

// An error points at the whole character, not at the first byte of its
// encoding read as a character of its own; a byte that is not UTF-8 is
// shown in hex.
func TestValidateNamesTheWholeCharacter(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"ünï", `'ü' at byte 0`},
		{"ab😀", `'😀' at byte 2`},
		{"a\xffb", `'\xff' at byte 1`},
		{"a b", `' ' at byte 1`},
	} {
		err := Validate("id", tc.id)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%q) = %v, want it to say %s", tc.id, err, tc.want)
		}
	}
}
