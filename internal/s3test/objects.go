package s3test

import (
	"bytes"
	"context"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Objects reads and writes the objects of one bucket with plain requests,
// one each, for tests and tools that look behind the library's back or
// change what it stored.
type Objects struct {
	Client *s3.Client
	Bucket string
}

// Get returns the body and the ETag of key.
func (o Objects) Get(ctx context.Context, key string) (body []byte, etag string, err error) {
	out, err := o.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: &o.Bucket, Key: &key})
	if err != nil {
		return nil, "", err
	}
	body, err = ReadAll(out.Body, nil)
	return body, aws.ToString(out.ETag), err
}

// Put writes body to key, whatever is there, and returns its ETag.
func (o Objects) Put(ctx context.Context, key string, body []byte) (etag string, err error) {
	out, err := o.Client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &o.Bucket, Key: &key, Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
	})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.ETag), nil
}

// Create writes body at key unless an object is there (If-None-Match: *),
// as a presigned PUT of s3task's does.
func (o Objects) Create(ctx context.Context, key string, body []byte) (etag string, err error) {
	out, err := o.Client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &o.Bucket, Key: &key, Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
		IfNoneMatch: aws.String("*"),
	})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.ETag), nil
}

// Delete deletes key.
func (o Objects) Delete(ctx context.Context, key string) error {
	_, err := o.Client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &o.Bucket, Key: &key})
	return err
}

// Keys returns the keys under prefix, in order, listing page by page. If a
// listing fails it returns the keys listed before it, with the error.
func (o Objects) Keys(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	in := &s3.ListObjectsV2Input{Bucket: &o.Bucket, Prefix: &prefix}
	for {
		out, err := o.Client.ListObjectsV2(ctx, in)
		if err != nil {
			return keys, err
		}
		for _, obj := range out.Contents {
			keys = append(keys, aws.ToString(obj.Key))
		}
		if !aws.ToBool(out.IsTruncated) || out.NextContinuationToken == nil {
			return keys, nil
		}
		in.ContinuationToken = out.NextContinuationToken
	}
}

// ReadAll reads r to the end and closes it, or returns err, the error of
// opening it, if that failed. It takes what an open call returns:
//
//	data, err := s3test.ReadAll(job.OpenInput(ctx))
func ReadAll(r io.ReadCloser, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}
