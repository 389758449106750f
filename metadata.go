package s3task

import (
	"maps"
	"slices"
	"unicode/utf8"
)

// Limits of a task's metadata ([CreateParams.Metadata]).
const (
	MaxMetadataEntries  = 32      // entries in the map
	MaxMetadataKeyLen   = 64      // bytes in a key
	MaxMetadataValueLen = 1024    // bytes in a value
	MaxMetadataSize     = 8 << 10 // bytes in all keys and values together
)

// validMetadataKey reports whether k may name a metadata entry: 1 to
// MaxMetadataKeyLen ASCII letters, digits, '.', '-' and '_'. That is what
// an HTTP header name, a log attribute and an environment variable can
// all carry, so a host may pass entries on through any of them.
func validMetadataKey(k string) bool {
	if k == "" || len(k) > MaxMetadataKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// checkMetadata validates a task's metadata against the documented limits.
// Keys are checked in sorted order, so the error for a map with several
// faults is always the same one.
func checkMetadata(md map[string]string) error {
	if len(md) > MaxMetadataEntries {
		return invalidArg("CreateParams.Metadata has %d entries, at most %d", len(md), MaxMetadataEntries)
	}
	size := 0
	for _, k := range slices.Sorted(maps.Keys(md)) {
		v := md[k]
		if !validMetadataKey(k) {
			return invalidArg("CreateParams.Metadata key %q must be 1 to %d ASCII letters, digits, '.', '-' or '_'", truncate(k, 40), MaxMetadataKeyLen)
		}
		if len(v) > MaxMetadataValueLen || !utf8.ValidString(v) {
			return invalidArg("CreateParams.Metadata[%q] must be at most %d bytes of UTF-8", k, MaxMetadataValueLen)
		}
		size += len(k) + len(v)
	}
	if size > MaxMetadataSize {
		return invalidArg("CreateParams.Metadata holds %d bytes, at most %d", size, MaxMetadataSize)
	}
	return nil
}
