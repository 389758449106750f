package s3task

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/s3task/s3task/internal/s3x"
)

// Enforcement is what [Store.CheckBackend] found out about one rule: that
// the store enforces it, that it does not, or that the check could not
// tell.
type Enforcement string

// The values of an [Enforcement].
const (
	// Enforced: the store refused what the rule forbids.
	Enforced Enforcement = "enforced"
	// NotEnforced: the store let through what the rule forbids.
	NotEnforced Enforcement = "not enforced"
	// NotChecked: the check did not get that far, or the answer was
	// inconclusive (BackendReport.Notes says why).
	NotChecked Enforcement = "not checked"
)

// checkCleanup bounds the deletes of CheckBackend's scratch objects,
// which run after the caller's context may have ended.
const checkCleanup = 2 * time.Second

// checkRacers is how many writers race in CheckBackend's atomicity probe.
const checkRacers = 4

// BackendReport is what [Store.CheckBackend] measured on the bucket. Every
// field is filled as far as the check got, also when it returns an error.
type BackendReport struct {
	// ConditionalCreate: a second PutObject with If-None-Match: * on a key
	// that exists was refused (412 or 409). Creates of tasks and of attempt
	// outputs depend on it.
	ConditionalCreate Enforcement `json:"conditional_create"`
	// ConditionalUpdate: a PutObject with If-Match on an ETag the object
	// does not have was refused. Every change of a record depends on it.
	ConditionalUpdate Enforcement `json:"conditional_update"`
	// AtomicUpdate: of four PutObjects sent at once with If-Match on the
	// object's current ETag, exactly one succeeded, and what the object then
	// holds is that one's body. It is a short race, so a pass shows the
	// store is not plainly check-then-write; it cannot prove atomicity under
	// every timing. NotChecked when no racer won (each was refused as a
	// conflict, which is safe).
	AtomicUpdate Enforcement `json:"atomic_update"`
	// RaceWinners is how many of the racing writes succeeded: 1 on an
	// atomic store.
	RaceWinners int `json:"race_winners"`
	// IfMatchMissingKey: a PutObject with If-Match on a key that does not
	// exist was refused rather than creating it.
	IfMatchMissingKey Enforcement `json:"if_match_missing_key"`
	// IfMatchMissingKeyAnswer is the store's answer to that write, as
	// "<HTTP status> <error code>": AWS S3 answers "404 NoSuchKey", some
	// stores "412 PreconditionFailed". The library reads both alike.
	IfMatchMissingKeyAnswer string `json:"if_match_missing_key_answer"`
	// PresignSignature: a presigned GET whose signature was altered was
	// refused. Not required by the library, but without it anybody can
	// forge a presigned URL (gofakes3 checks no signatures).
	PresignSignature Enforcement `json:"presign_signature"`
	// PresignExpiry: a presigned GET signed an hour ago (by the server's
	// clock) for one minute was refused. Not required by the library, but
	// without it a presigned URL is valid for ever.
	PresignExpiry Enforcement `json:"presign_expiry"`
	// ServerClockOffset is the server's clock minus this machine's, as the
	// Date headers of the check's answers showed it (to about a second).
	// Leases are judged by the server's clock, so an offset is harmless;
	// it is reported because it surprises operators.
	ServerClockOffset time.Duration `json:"server_clock_offset"`
	// Notes explain what the fields cannot: answers that left a probe
	// inconclusive, and why a probe was not sent. Empty on a store that
	// answered every probe plainly.
	Notes []string `json:"notes,omitempty"`
}

// CheckBackend proves that the bucket enforces conditional writes, without
// which two workers could both claim one task, and reports what it found.
// Under the prefix (in _check/) it creates a scratch object with
// If-None-Match: *, then tries to create it again, to overwrite it with a
// wrong If-Match ETag, and to write another key with If-Match although it
// does not exist (each must be refused); races four If-Match writes of the
// current ETag (one must win); reads the object through a presigned GET,
// one with an altered signature and one expired; and deletes what it
// wrote, giving those deletes at most checkCleanup (2 s) of their own, so
// that it returns that long at most after ctx ends even when S3 has
// stopped answering.
//
// Requests: eight PUTs, three GETs (presigned) and one DELETE, two when
// the If-Match write on a missing key created it. It takes a few round
// trips; run it once at start-up, not per request. Each PUT is sent once,
// without the SDK's retries, since a resend would blur its answer: a
// transient failure fails the check, and running it again is the remedy.
//
// The report is never nil. Errors: [ErrConditionalWritesUnsupported]
// (wrapping what the store did) when a write that must be refused went
// through, racing writes both won, or the headers are not implemented; S3
// errors otherwise (for example when the credentials may not write under
// the prefix). Presigned-URL findings are reported, never an error: the
// library's own calls do not depend on them.
func (s *Store) CheckBackend(ctx context.Context) (*BackendReport, error) {
	r := &BackendReport{
		ConditionalCreate: NotChecked, ConditionalUpdate: NotChecked, AtomicUpdate: NotChecked,
		IfMatchMissingKey: NotChecked, PresignSignature: NotChecked, PresignExpiry: NotChecked,
	}
	key := s.opts.Prefix + "_check/" + NewID()
	missing := s.opts.Prefix + "_check/" + NewID()
	put := func(key, body string, ifNoneMatch, ifMatch *string) (string, error) {
		out, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &s.bucket, Key: &key, Body: strings.NewReader(body),
			ContentLength: aws.Int64(int64(len(body))), IfNoneMatch: ifNoneMatch, IfMatch: ifMatch,
		}, func(o *s3.Options) { o.RetryMaxAttempts = 1 }) // a resend would blur the answer
		if err != nil {
			s.observeErr(err)
			return "", err
		}
		s.observe(out.ResultMetadata) // learn the server's clock before the first task
		return aws.ToString(out.ETag), nil
	}
	createdMissing := false
	defer func() {
		// Best effort: a leftover scratch object is harmless, and a
		// stalled S3 must not hold the caller past its deadline.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkCleanup)
		defer cancel()
		_, _ = s.client.DeleteObject(dctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
		if createdMissing {
			_, _ = s.client.DeleteObject(dctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &missing})
		}
	}()

	var problems []string
	var cause error
	unsupported := func(what string, err error) {
		if err != nil {
			what += ": " + err.Error()
			if cause == nil {
				cause = err
			}
		}
		problems = append(problems, what)
	}
	// refused judges the answer to a write that must be refused, and
	// reports whether it went through.
	refused := func(err error, field *Enforcement, what string) (wentThrough bool) {
		switch {
		case err == nil:
			*field = NotEnforced
			unsupported(what+" succeeded", nil)
			return true
		case s3x.Lost(err):
			*field = Enforced
		case s3x.NotImplemented(err):
			*field = NotEnforced
			unsupported(what+": not implemented", err)
		default:
			*field = NotEnforced
			unsupported(what+" failed in an unexpected way", err)
		}
		return false
	}

	etag, err := put(key, "first", aws.String("*"), nil)
	if err != nil {
		if s3x.NotImplemented(err) {
			r.ConditionalCreate = NotEnforced
			return r, fmt.Errorf("%w: If-None-Match is not implemented: %w", ErrConditionalWritesUnsupported, err)
		}
		return r, fmt.Errorf("s3task: check backend: create %s: %w", key, err)
	}

	// A write that went through changed the object: race on its ETag.
	if e, err := put(key, "second", aws.String("*"), nil); refused(err, &r.ConditionalCreate, "a second If-None-Match: * create of one key") {
		etag = e
	}
	if e, err := put(key, "third", nil, aws.String(`"00000000000000000000000000000000"`)); refused(err, &r.ConditionalUpdate, "a write with a wrong If-Match ETag") {
		etag = e
	}
	_, err = put(missing, "fourth", nil, aws.String(`"00000000000000000000000000000000"`))
	r.IfMatchMissingKeyAnswer = answerOf(err)
	createdMissing = err == nil
	refused(err, &r.IfMatchMissingKey, "an If-Match write to a missing key")

	winner := s.checkRace(ctx, r, put, key, etag)
	if r.RaceWinners > 1 {
		unsupported(fmt.Sprintf("%d of %d writes racing with If-Match on one ETag all succeeded", r.RaceWinners, checkRacers), nil)
	}

	s.checkPresign(ctx, r, key, winner)
	if r.AtomicUpdate == NotEnforced && r.RaceWinners == 1 {
		unsupported("after a race of If-Match writes the object holds a loser's body", nil)
	}
	r.ServerClockOffset = s.serverClock().Sub(s.opts.Clock()).Round(time.Millisecond)

	if len(problems) > 0 {
		msg := strings.Join(problems, "; ")
		if cause != nil {
			return r, fmt.Errorf("%w: %w", ErrConditionalWritesUnsupported, &causedError{msg: msg, cause: cause})
		}
		return r, fmt.Errorf("%w: %s", ErrConditionalWritesUnsupported, msg)
	}
	return r, nil
}

// causedError is a message that already quotes its cause, keeping the
// cause in the chain for errors.Is and errors.As.
type causedError struct {
	msg   string
	cause error
}

func (e *causedError) Error() string { return e.msg }
func (e *causedError) Unwrap() error { return e.cause }

// checkRace sends checkRacers If-Match writes of etag at once and records
// the outcome; it returns the winner's body ("" without a single winner).
func (s *Store) checkRace(ctx context.Context, r *BackendReport, put func(key, body string, ifNoneMatch, ifMatch *string) (string, error), key, etag string) string {
	errs := make([]error, checkRacers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range checkRacers {
		wg.Go(func() {
			<-start
			_, errs[i] = put(key, fmt.Sprintf("racer %d", i), nil, &etag)
		})
	}
	close(start)
	wg.Wait()
	winner := ""
	var odd []string
	for i, err := range errs {
		switch {
		case err == nil:
			r.RaceWinners++
			winner = fmt.Sprintf("racer %d", i)
		case !s3x.Lost(err):
			odd = append(odd, err.Error())
		}
	}
	switch {
	case r.RaceWinners > 1:
		r.AtomicUpdate = NotEnforced
		return ""
	case len(odd) > 0:
		r.Notes = append(r.Notes, "race of If-Match writes inconclusive: "+strings.Join(odd, "; "))
	case r.RaceWinners == 0:
		r.Notes = append(r.Notes, "race of If-Match writes: every writer was refused as a conflict, none won")
	default:
		r.AtomicUpdate = Enforced // confirmed by the presigned GET's body
	}
	if r.RaceWinners != 1 {
		return ""
	}
	return winner
}

// checkPresign reads key through presigned GETs: a valid one (whose body
// must be winner's, when there is a winner), one with an altered
// signature and one that expired. Without a working valid one the other
// two tell nothing and are not sent.
func (s *Store) checkPresign(ctx context.Context, r *BackendReport, key, winner string) {
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: &key}
	now := s.serverClock()
	sign := func(at time.Time, ttl time.Duration) (string, error) {
		pc := s3.NewPresignClient(s.client, func(o *s3.PresignOptions) {
			o.Presigner = signedAt{at: at}
			o.Expires = ttl
		})
		req, err := pc.PresignGetObject(ctx, in)
		if err != nil {
			return "", err
		}
		return req.URL, nil
	}
	get := func(u string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return 0, "", err
		}
		resp, err := s.client.Options().HTTPClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return resp.StatusCode, string(body), err
	}
	// judge reads an answer to a request that must be refused.
	judge := func(field *Enforcement, what string, status int, err error) {
		switch {
		case err != nil:
			r.Notes = append(r.Notes, what+": "+err.Error())
		case status >= 200 && status < 300:
			*field = NotEnforced
		case status == http.StatusForbidden || status == http.StatusBadRequest || status == http.StatusUnauthorized:
			*field = Enforced
		default:
			r.Notes = append(r.Notes, fmt.Sprintf("%s: answered %d", what, status))
		}
	}

	valid, err := sign(now, time.Minute)
	if err != nil {
		r.Notes = append(r.Notes, "presign: "+err.Error())
		return
	}
	status, body, err := get(valid)
	switch {
	case err != nil:
		r.Notes = append(r.Notes, "presigned GET: "+err.Error())
		return
	case status != http.StatusOK:
		r.Notes = append(r.Notes, fmt.Sprintf("a valid presigned GET answered %d, so the presigned-URL probes tell nothing", status))
		return
	}
	if winner != "" && body != winner {
		r.AtomicUpdate = NotEnforced
		r.Notes = append(r.Notes, fmt.Sprintf("after the race the object holds %q, but %q won", body, winner))
	}

	if u, err := url.Parse(valid); err == nil && u.Query().Get("X-Amz-Signature") != "" {
		sig := u.Query().Get("X-Amz-Signature")
		flip := "0"
		if strings.HasSuffix(sig, "0") {
			flip = "1"
		}
		// Only the signature changes; every signed part stays as it was.
		altered := strings.Replace(valid, "X-Amz-Signature="+sig, "X-Amz-Signature="+sig[:len(sig)-1]+flip, 1)
		status, _, err := get(altered)
		judge(&r.PresignSignature, "presigned GET with an altered signature", status, err)
	}
	if expired, err := sign(now.Add(-time.Hour), time.Minute); err == nil {
		status, _, err := get(expired)
		judge(&r.PresignExpiry, "presigned GET expired an hour ago", status, err)
	}
}

// signedAt is S3's presigner with the signing time replaced, so that a
// URL is signed by the server's clock, or as if long ago.
type signedAt struct{ at time.Time }

func (p signedAt) PresignHTTP(ctx context.Context, creds aws.Credentials, r *http.Request, payloadHash, service, region string, _ time.Time, optFns ...func(*v4.SignerOptions)) (string, http.Header, error) {
	// S3 signs the path as sent, without escaping it again.
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	return signer.PresignHTTP(ctx, creds, r, payloadHash, service, region, p.at, optFns...)
}

// answerOf describes a write's answer as "<status> <code>", or "200" when
// it succeeded.
func answerOf(err error) string {
	if err == nil {
		return "200 (the write succeeded)"
	}
	status := 0
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	code := ""
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	switch {
	case status != 0 && code != "":
		return fmt.Sprintf("%d %s", status, code)
	case status != 0:
		return fmt.Sprint(status)
	}
	return err.Error()
}
