package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3/backend/s3bolt"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/examples/internal/s3client"
	"github.com/s3task/s3task/mems3"
)

// objectStore is the S3 the program works against: its own in-process one
// or a real bucket.
type objectStore struct {
	client *s3.Client
	bucket string
	about  string // one line for the start-up banner

	embedded *mems3.Server // nil for a real S3
	db       *bolt.DB      // the embedded S3's database, if persistent
}

// close stops the embedded S3, if any, and closes its database.
func (o *objectStore) close() error {
	var errs []error
	if o.embedded != nil {
		errs = append(errs, o.embedded.Close())
	}
	if o.db != nil {
		errs = append(errs, o.db.Close())
	}
	return errors.Join(errs...)
}

// openObjectStore starts the embedded S3 or connects to the configured one.
func openObjectStore(ctx context.Context, cfg *config) (*objectStore, error) {
	if cfg.embedded() {
		return openEmbedded(cfg)
	}
	return openExternal(ctx, cfg)
}

// openEmbedded starts the library's in-memory S3, mems3 (gofakes3), on a
// loopback port. With a data folder its objects live in a bbolt file there
// and survive a restart; without one they live in memory.
//
// Its CORS answer allows every origin, which lets the operator page (on
// another loopback port) upload with the presigned POST form and PUT.
func openEmbedded(cfg *config) (*objectStore, error) {
	o := &objectStore{}
	var opts mems3.Options // the default backend keeps objects in memory
	where := "in memory only: objects are lost at exit"
	if cfg.dataDir != "" {
		if err := os.MkdirAll(cfg.dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("embedded S3: data folder: %w", err)
		}
		file := filepath.Join(cfg.dataDir, "s3.bolt")
		db, err := bolt.Open(file, 0o600, &bolt.Options{Timeout: time.Second})
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("embedded S3: %s is in use by another csvbatch process; give this one its own -data folder, or point it at that process's S3 with -bucket tasks -s3-endpoint <its S3 URL> -s3-path-style", file)
		}
		if err != nil {
			return nil, fmt.Errorf("embedded S3: open %s: %w", file, err)
		}
		o.db = db
		opts.Backend = s3bolt.New(db)
		where = "data in " + file
	}
	srv, err := mems3.Listen(cfg.s3Listen, &opts)
	if err != nil {
		o.close()
		return nil, fmt.Errorf("embedded S3: %w", err)
	}
	o.embedded = srv
	var wraps []func(http.RoundTripper) http.RoundTripper
	if cfg.s3Wrap != nil {
		wraps = append(wraps, cfg.s3Wrap)
	}
	o.client = srv.Client(wraps...)
	o.bucket = srv.Bucket()
	o.about = fmt.Sprintf("embedded S3 (gofakes3) at %s, bucket %q, %s", srv.URL(), srv.Bucket(), where)
	return o, nil
}

// openExternal builds a client from the standard AWS configuration, with
// the flags on top (see s3client), and proves it has credentials.
func openExternal(ctx context.Context, cfg *config) (*objectStore, error) {
	sc := cfg.s3
	if cfg.s3Wrap != nil {
		sc.HTTPClient = &http.Client{Transport: cfg.s3Wrap(http.DefaultTransport)}
	}
	client, awsCfg, err := s3client.New(ctx, sc)
	if err != nil {
		return nil, fmt.Errorf("S3: %w", err)
	}
	if awsCfg.Credentials == nil {
		return nil, errors.New("S3: no AWS credentials provider: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE")
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := awsCfg.Credentials.Retrieve(cctx); err != nil {
		return nil, fmt.Errorf("S3: no usable AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE): %w", err)
	}
	about := fmt.Sprintf("S3 bucket %q in region %s", cfg.bucket, client.Options().Region)
	if endpoint := s3client.Endpoint(client); endpoint != "" {
		about = fmt.Sprintf("S3 bucket %q at %s (path-style %v)", cfg.bucket, endpoint, client.Options().UsePathStyle)
	}
	return &objectStore{client: client, bucket: cfg.bucket, about: about}, nil
}

// s3Retry is the wait after the n-th failed try (n from 1) to reach S3 at
// start: 1s, 2s, 4s, 8s, then 10s between tries.
func s3Retry(n int) time.Duration {
	return min(time.Second<<min(n-1, 4), 10*time.Second)
}

// awaitS3 calls check, which proves that S3 answers and the bucket
// exists, until it succeeds, logging each failed try; so csvbatch may
// start before its S3 (versitygw, say, which itself wants csvbatch's
// webhook up first), or while the bucket is being made. It gives up when
// ctx ends, or bound (if positive) after it started, returning the last
// try's error; at once on ErrConditionalWritesUnsupported, which waiting
// does not mend. about names the S3 in the log.
func awaitS3(ctx context.Context, log *slog.Logger, about string, bound time.Duration, check func(context.Context) error) error {
	if bound > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	for try := 1; ; try++ {
		err := check(ctx)
		switch {
		case err == nil:
			if try > 1 {
				log.Info("csvbatch: S3 answers", "s3", about, "tries", try)
			}
			return nil
		case errors.Is(err, s3task.ErrConditionalWritesUnsupported):
			return err
		}
		stop := func() error {
			if bound > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s did not answer within -s3-wait %s (%d tries): %w", about, bound, try, err)
			}
			return fmt.Errorf("stopped while waiting for %s (%d tries): %w", about, try, err)
		}
		if ctx.Err() != nil {
			return stop()
		}
		wait := s3Retry(try)
		log.Warn("csvbatch: S3 does not answer, or the bucket is missing; trying again", "s3", about, "try", try, "retry_in", wait, "err", err)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return stop()
		case <-timer.C:
		}
	}
}
