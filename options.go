package s3task

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Store defaults. A zero field in [StoreOptions] means the default.
const (
	DefaultPrefix          = "batch-tasks/"
	DefaultMaxAttempts     = 3
	DefaultMaxInputSize    = 100 << 20 // 100 MiB
	DefaultMaxPayloadSize  = 64 << 10  // 64 KiB
	DefaultListConcurrency = 8
	DefaultConflictRetries = 5
	DefaultListLimit       = 50
	MaxListLimit           = 1000
)

// StoreOptions configures a [Store]. A nil *StoreOptions, and every zero
// field, means the documented default. NewStore copies the struct; changing it
// afterwards has no effect.
type StoreOptions struct {
	// Prefix is where tasks live in the bucket. It must end in "/" and must
	// not start with one. Default [DefaultPrefix].
	Prefix string

	// InputExt and OutputExt are appended to the input and output object
	// names, e.g. ".csv" gives input.csv and output-attempt-1.csv. They may
	// hold letters, digits, '.', '-' and '_'. Default: none.
	InputExt  string
	OutputExt string

	// MaxAttempts is the number of attempts a new task gets when
	// CreateParams.MaxAttempts is zero. Default [DefaultMaxAttempts].
	MaxAttempts int

	// MaxInputSize is the largest input Submit accepts, in bytes. It also caps
	// presigned POST uploads and what a worker will read. Default
	// [DefaultMaxInputSize].
	MaxInputSize int64

	// MaxPayloadSize caps CreateParams.Payload, in bytes. Default
	// [DefaultMaxPayloadSize].
	MaxPayloadSize int

	// ListConcurrency bounds the record reads one List page runs at once.
	// Default [DefaultListConcurrency].
	ListConcurrency int

	// ConflictRetries is how many times an operator call (Submit, Retry,
	// Cancel) re-reads and re-decides after losing a compare-and-set before
	// it returns [ErrConflict]. Default [DefaultConflictRetries].
	ConflictRetries int

	// Clock returns the local time. The library corrects it by the offset it
	// observes from the S3 server's Date headers, so leases are judged by the
	// server's clock. Default time.Now. Meant for tests.
	Clock func() time.Time

	// Logger receives the library's logs. Default: slog.Default().
	Logger *slog.Logger
}

// withDefaults returns a validated copy with every default filled in.
func (o *StoreOptions) withDefaults() (StoreOptions, error) {
	var c StoreOptions
	if o != nil {
		c = *o
	}
	bad := func(field, format string, args ...any) (StoreOptions, error) {
		return StoreOptions{}, fmt.Errorf("%w: StoreOptions.%s %s", ErrInvalidOptions, field, fmt.Sprintf(format, args...))
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(c.Prefix, "/") || strings.HasPrefix(c.Prefix, "/") || strings.Contains(c.Prefix, "//") {
		return bad("Prefix", "%q must end in '/' and not start with it or contain '//'", c.Prefix)
	}
	for name, ext := range map[string]string{"InputExt": c.InputExt, "OutputExt": c.OutputExt} {
		if strings.Trim(ext, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") != "" || len(ext) > 32 {
			return bad(name, "%q may hold only letters, digits, '.', '-' and '_' (at most 32)", ext)
		}
	}
	ints := []struct {
		name string
		v    *int
		def  int
	}{
		{"MaxAttempts", &c.MaxAttempts, DefaultMaxAttempts},
		{"MaxPayloadSize", &c.MaxPayloadSize, DefaultMaxPayloadSize},
		{"ListConcurrency", &c.ListConcurrency, DefaultListConcurrency},
		{"ConflictRetries", &c.ConflictRetries, DefaultConflictRetries},
	}
	for _, f := range ints {
		if *f.v < 0 {
			return bad(f.name, "is %d, must not be negative", *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.MaxPayloadSize > maxRecordSize/2 {
		return bad("MaxPayloadSize", "is %d, at most %d", c.MaxPayloadSize, maxRecordSize/2)
	}
	switch {
	case c.MaxInputSize < 0:
		return bad("MaxInputSize", "is %d, must not be negative", c.MaxInputSize)
	case c.MaxInputSize == 0:
		c.MaxInputSize = DefaultMaxInputSize
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}
