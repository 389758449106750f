package main

import (
	"strings"
)

// unreleasedChanges returns the text that may name an incompatible change:
// the lines under a "### Changed" or "### Removed" heading (the first word
// of the heading, in any case) inside the "## [Unreleased]" section of a
// changelog in Keep a Changelog form. The section ends at the next "## "
// heading. Without such a section the text is empty.
func unreleasedChanges(changelog string) string {
	var b strings.Builder
	inUnreleased, counts := false, false
	for _, line := range strings.Split(changelog, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "## "):
			head := strings.ToLower(strings.TrimSpace(strings.TrimPrefix(trimmed, "## ")))
			inUnreleased = head == "unreleased" || strings.HasPrefix(head, "[unreleased]")
			counts = false
		case !inUnreleased:
		case strings.HasPrefix(trimmed, "### "):
			words := strings.Fields(strings.ToLower(strings.TrimPrefix(trimmed, "### ")))
			counts = len(words) > 0 && (words[0] == "changed" || words[0] == "removed")
		case counts:
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// mentions reports whether text holds one of names standing alone: not
// preceded or followed by a letter, digit or underscore, so that
// "Store.CreateForUpload" does not name Store.Create while
// "s3task.Store.Create" and "`Store.Create`" do.
func mentions(text string, names ...string) bool {
	for _, name := range names {
		if name == "" {
			continue
		}
		for from := 0; ; {
			i := strings.Index(text[from:], name)
			if i < 0 {
				break
			}
			start, end := from+i, from+i+len(name)
			if (start == 0 || !isIdentByte(text[start-1])) && (end == len(text) || !isIdentByte(text[end])) {
				return true
			}
			from = start + 1
		}
	}
	return false
}

func isIdentByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c >= 0x80
}
