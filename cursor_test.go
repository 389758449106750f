package s3task

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// FuzzDecodeCursor feeds arbitrary strings to the cursor decoder. Whatever
// it accepts must be a position that stays inside the task prefix when
// appended to it: no '/', so it can never name a key in another folder,
// valid UTF-8, bounded length. Everything else is ErrInvalidCursor.
func FuzzDecodeCursor(f *testing.F) {
	for _, seed := range []string{
		"", "x", "%%%", encodeCursor("7YBQAJHRYZ2SW6N2QEEW7H81JP0"), encodeCursor("A2.bak"),
		encodeCursor("../x"), encodeCursor("active/"), encodeCursor(strings.Repeat("a", 1025)),
		base64.StdEncoding.EncodeToString([]byte("7YBQ+/")), encodeCursor("\xff\xfe"),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, c string) {
		after, err := decodeCursor(c)
		if err != nil {
			if !errors.Is(err, ErrInvalidCursor) {
				t.Fatalf("decodeCursor(%q) error %v does not wrap ErrInvalidCursor", c, err)
			}
			return
		}
		if after == "" || strings.Contains(after, "/") || len(after) > 1024 {
			t.Fatalf("decodeCursor(%q) accepted %q", c, after)
		}
		if back := encodeCursor(after); back != c {
			t.Fatalf("cursor %q decodes to %q, which encodes to %q: two spellings of one position", c, after, back)
		}
	})
}
