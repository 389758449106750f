package s3task

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task/internal/s3x"
)

// CheckBackend proves that the bucket enforces conditional writes, without
// which two workers could both claim one task. Under the prefix it creates a
// scratch object with If-None-Match: *, tries to create it again (must be
// refused), tries to overwrite it with a wrong If-Match ETag (must be
// refused), then deletes it. Requests: three PUTs and one DELETE.
//
// Errors: [ErrConditionalWritesUnsupported] (wrapping what the store did)
// when a refused write went through or the headers are not implemented; S3
// errors otherwise.
func (s *Store) CheckBackend(ctx context.Context) error {
	key := s.opts.Prefix + "_check/" + NewID()
	put := func(body string, ifNoneMatch, ifMatch *string) error {
		out, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &s.bucket, Key: &key, Body: strings.NewReader(body),
			ContentLength: aws.Int64(int64(len(body))), IfNoneMatch: ifNoneMatch, IfMatch: ifMatch,
		})
		if err == nil {
			s.observe(out.ResultMetadata) // learn the server's clock before the first task
		}
		return err
	}
	defer func() {
		// Best effort: a leftover scratch object is harmless.
		_, _ = s.client.DeleteObject(context.WithoutCancel(ctx), &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
	}()
	unsupported := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrConditionalWritesUnsupported, what, err)
		}
		return fmt.Errorf("%w: %s", ErrConditionalWritesUnsupported, what)
	}
	if err := put("first", aws.String("*"), nil); err != nil {
		if s3x.NotImplemented(err) {
			return unsupported("If-None-Match is not implemented", err)
		}
		return fmt.Errorf("s3task: check backend: create %s: %w", key, err)
	}
	switch err := put("second", aws.String("*"), nil); {
	case err == nil:
		return unsupported("a second If-None-Match: * create of one key succeeded", nil)
	case !s3x.Lost(err):
		return unsupported("a second If-None-Match: * create failed in an unexpected way", err)
	}
	switch err := put("third", nil, aws.String(`"00000000000000000000000000000000"`)); {
	case err == nil:
		return unsupported("a write with a wrong If-Match ETag succeeded", nil)
	case !s3x.Lost(err):
		return unsupported("a write with a wrong If-Match ETag failed in an unexpected way", err)
	}
	return nil
}
