package cli

import (
	"fmt"
	"strings"
	"unicode"
)

// printable is s with every control character but newline and tab written as an escape
// (\x1b, \u009b): what the cluster says (an event, a termination message, a metric's name a
// trainer chose) is shown to the user, never let drive the user's terminal.
func printable(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !isControl(r):
			b.WriteRune(r)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

func isControl(r rune) bool { return r != '\n' && r != '\t' && unicode.IsControl(r) }
