package controlplane

import (
	"strings"
	"testing"

	"github.com/rivora/rivora/internal/ids"
)

// FuzzParseLimits feeds arbitrary bytes to the limits-file parser: it
// never panics; a refusal names the file; and what it accepts holds only
// valid destination ids and limits within the bounds the API enforces,
// with no field explicitly zero.
func FuzzParseLimits(f *testing.F) {
	for _, seed := range []string{
		"defaults:\n  rate_per_second: 50\n  burst: 200\n  max_attempts: 8\n  window: 72h\n  timeout: 10s\n  max_in_flight: 32\n",
		"destinations:\n  orders:\n    rate_per_second: 25\n  billing:\n",
		"", "~", "---\n---\n", "defaults: {}\n", "defaults:\n  burst: 2\n  burst: 3\n",
		"a: &a [*a, *a]\nb: *a\n", "defaults: !!binary aGVsbG8=\n", "defaults:\n  rate_per_second: .nan\n",
		"defaults:\n  window: 2161h\n", "destinations:\n  ? [a, b]\n  : {}\n", "{defaults: {timeout: 99ms}}\n",
		"defaults:\n  <<: {burst: 5}\n", "destinations:\n  \"../x\": {}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lf, err := ParseLimits("limits.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "limits.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if err := checkLimits(lf.Defaults); err != nil {
			t.Fatalf("accepted defaults out of bounds: %v", err)
		}
		for id, l := range lf.Destinations {
			if err := ids.Validate("id", id); err != nil {
				t.Fatalf("accepted destination id: %v", err)
			}
			if err := checkLimits(l); err != nil {
				t.Fatalf("accepted limits of %q out of bounds: %v", id, err)
			}
		}
		// Describing and diffing what was accepted never panics either.
		_ = describeLimitsFile(lf)
		_ = diffLimitsFiles(emptyLimitsFile(), lf)
	})
}
