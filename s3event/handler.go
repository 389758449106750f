package s3event

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// DefaultMaxBody is the largest webhook delivery [NewHandler] reads unless
// told otherwise: S3 sends one record per notification, about 1 KiB; some
// servers batch a few.
const DefaultMaxBody = 1 << 20

// DefaultMaxRecords is the most records one webhook delivery may hold
// unless [HandlerOptions.MaxRecords] says otherwise: S3 sends one record
// per notification, and the servers that batch send a few.
const DefaultMaxRecords = 10

// HandlerOptions configure [NewHandler].
type HandlerOptions struct {
	// Token is the shared secret every delivery must carry, as the header
	// "Authorization: Bearer TOKEN" or, for servers that cannot send a
	// header (versitygw), as the query parameter token=TOKEN in the URL
	// the server is given (query-escaped there, if it holds characters
	// such as "+", "%" or "&"; a token of letters and digits needs no
	// escaping). It is compared in constant time. Required unless
	// Unauthenticated is set.
	Token string

	// Unauthenticated accepts deliveries without a token: only for a
	// handler that nothing but the S3 server can reach. Events are hints,
	// so a forged one costs a request at most (see the package doc,
	// Floods), but a flood of them costs one each. With a Token set as
	// well, the token is still required.
	Unauthenticated bool

	// MaxBody is the largest body read; a larger one is refused with 413.
	// Default DefaultMaxBody.
	MaxBody int64

	// MaxRecords is the most records one delivery may hold; one with more
	// is refused whole with 413, and none of its events is passed on. It
	// bounds what one delivery can cost (see the package doc, Floods).
	// Default DefaultMaxRecords.
	MaxRecords int
}

// NewHandler returns an http.Handler that accepts S3 event notifications
// posted by a webhook and passes them to n (see [Deliver]). It answers 204
// to a delivery it read, whether or not its events concerned n (S3's test
// event included); 405 to a method other than POST; 401 to a missing or
// wrong token; 413 to a body over MaxBody or a delivery of more than
// MaxRecords records; 400 to a body that is not an event notification. It
// checks the method and the token before it reads a byte of the body, so
// a caller without the token cannot make it read one. It writes nothing
// anywhere: n decides what to do with the events, and a worker only reads.
//
// It returns an error for options without a Token and without
// Unauthenticated, or with a negative MaxBody or MaxRecords.
func NewHandler(n Notifier, opts *HandlerOptions) (http.Handler, error) {
	var o HandlerOptions
	if opts != nil {
		o = *opts
	}
	switch {
	case n == nil:
		return nil, errors.New("s3event: nil Notifier")
	case o.Token == "" && !o.Unauthenticated:
		return nil, errors.New("s3event: HandlerOptions.Token is empty: set it, or set Unauthenticated")
	case o.MaxBody < 0:
		return nil, fmt.Errorf("s3event: HandlerOptions.MaxBody is negative (%d)", o.MaxBody)
	case o.MaxRecords < 0:
		return nil, fmt.Errorf("s3event: HandlerOptions.MaxRecords is negative (%d)", o.MaxRecords)
	}
	if o.MaxBody == 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.MaxRecords == 0 {
		o.MaxRecords = DefaultMaxRecords
	}
	return &handler{n: n, opts: o}, nil
}

type handler struct {
	n    Notifier
	opts HandlerOptions
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "s3event: POST an event notification", http.StatusMethodNotAllowed)
		return
	}
	if (h.opts.Token != "" || !h.opts.Unauthenticated) && !h.authorized(r) {
		http.Error(w, "s3event: missing or wrong token", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		http.Error(w, fmt.Sprintf("s3event: body over %d bytes", h.opts.MaxBody), http.StatusRequestEntityTooLarge)
		return
	case err != nil:
		http.Error(w, "s3event: reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	records, err := Parse(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(records) > h.opts.MaxRecords {
		http.Error(w, fmt.Sprintf("s3event: %d records in one delivery, over %d", len(records), h.opts.MaxRecords), http.StatusRequestEntityTooLarge)
		return
	}
	Deliver(h.n, records)
	w.WriteHeader(http.StatusNoContent)
}

// authorized reports whether r carries the token.
func (h *handler) authorized(r *http.Request) bool {
	got := r.URL.Query().Get("token")
	if scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		got = strings.TrimSpace(cred)
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(h.opts.Token)) == 1
}
