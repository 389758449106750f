package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
)

// wrapper wraps an HTTP transport, e.g. to count or delay requests.
type wrapper = func(http.RoundTripper) http.RoundTripper

// env is the S3 one scenario runs against: a fresh in-process server, or
// the -endpoint bucket under a prefix of its own.
type env struct {
	cfg      *config
	srv      *s3test.Server // nil against -endpoint
	endpoint string
	bucket   string
	prefix   string // every key the scenario writes starts with it; ends in "/"
	log      *slog.Logger

	mu         sync.Mutex
	transports []*http.Transport
}

// openEnv starts the S3 for scenario name.
func openEnv(cfg *config, name string) (*env, error) {
	e := &env{
		cfg: cfg,
		// The library's warnings go to stderr; its Info logs (one per
		// claim) would drown the output.
		log: quietLogger(),
	}
	if cfg.endpoint == "" {
		srv, err := s3test.Start()
		if err != nil {
			return nil, err
		}
		e.srv, e.endpoint, e.bucket, e.prefix = srv, srv.URL, srv.Bucket, "bench/"+name+"/"
		return e, nil
	}
	e.endpoint, e.bucket = cfg.endpoint, cfg.bucket
	if cfg.createBucket {
		_, err := e.client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &e.bucket})
		var ae smithy.APIError
		if err != nil && !(errors.As(err, &ae) && (ae.ErrorCode() == "BucketAlreadyOwnedByYou" || ae.ErrorCode() == "BucketAlreadyExists")) {
			return nil, fmt.Errorf("create bucket %s: %w", e.bucket, err)
		}
	}
	e.prefix = fmt.Sprintf("s3task-bench/%s-%s/%s/", time.Now().UTC().Format("20060102T150405"), randHex(3), name)
	return e, nil
}

// quietLogger logs the library's warnings to stderr, except those about
// requests cut short by a worker's shutdown: every scenario stops its
// workers, and a worker that was deleting a stale marker says so.
func quietLogger() *slog.Logger {
	return slog.New(dropCanceled{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})})
}

type dropCanceled struct{ slog.Handler }

func (h dropCanceled) Handle(ctx context.Context, r slog.Record) error {
	canceled := false
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && errors.Is(err, context.Canceled) {
			canceled = true
		}
		return !canceled
	})
	if canceled {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h dropCanceled) WithAttrs(as []slog.Attr) slog.Handler {
	return dropCanceled{h.Handler.WithAttrs(as)}
}

func (h dropCanceled) WithGroup(name string) slog.Handler {
	return dropCanceled{h.Handler.WithGroup(name)}
}

// close removes what the scenario wrote (against -endpoint, unless -keep),
// stops the in-process server and closes every idle connection.
func (e *env) close() {
	if e.srv == nil && !e.cfg.keep {
		if err := e.removeAll(context.Background()); err != nil {
			e.log.Warn("bench: cleanup", "prefix", e.prefix, "err", err)
		}
	}
	if e.srv != nil {
		e.srv.Close()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.transports {
		t.CloseIdleConnections()
	}
	e.transports = nil
}

// transport returns a new HTTP transport that close will shut down.
func (e *env) transport() *http.Transport {
	t := newHTTPTransport()
	e.mu.Lock()
	e.transports = append(e.transports, t)
	e.mu.Unlock()
	return t
}

// newHTTPTransport returns a transport of its own, as a separate machine
// would have. (The in-process server is on 127.0.0.1, which proxies skip.)
func newHTTPTransport() *http.Transport {
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
	}
}

// client returns an S3 client with its own transport, as a separate machine
// would have, wrapped by wraps (innermost first).
func (e *env) client(wraps ...wrapper) *s3.Client {
	return s3test.NewClientOn(e.endpoint, e.cfg.region, e.cfg.accessKey, e.cfg.secretKey, e.transport(), wraps...)
}

// objects reads and writes the bucket's objects through client.
func (e *env) objects(client *s3.Client) s3test.Objects {
	return s3test.Objects{Client: client, Bucket: e.bucket}
}

// httpClient returns a plain HTTP client, for presigned URLs.
func (e *env) httpClient(wraps ...wrapper) *http.Client {
	var rt http.RoundTripper = e.transport()
	for _, w := range wraps {
		rt = w(rt)
	}
	return &http.Client{Transport: rt, Timeout: 5 * time.Minute}
}

// storeOptions returns the options every Store of the scenario uses: its
// tasks live under e.prefix+sub+"/".
func (e *env) storeOptions(sub string) *s3task.StoreOptions {
	return &s3task.StoreOptions{Prefix: e.prefix + sub + "/", Logger: e.log, InputExt: ".csv", OutputExt: ".csv"}
}

// store returns a Store on client with e.storeOptions(sub), adjusted by
// change if not nil.
func (e *env) store(client *s3.Client, sub string, change func(*s3task.StoreOptions)) (*s3task.Store, error) {
	o := e.storeOptions(sub)
	if change != nil {
		change(o)
	}
	return s3task.NewStore(client, e.bucket, o)
}

// producer returns a Store on the scenario's tasks (sub "tasks") with a
// client of its own, wrapped by wraps, and n tasks prepared through it, par
// at a time, ready to submit.
func (e *env) producer(ctx context.Context, n, par int, wraps ...wrapper) (*s3task.Store, []string, error) {
	s, err := e.store(e.client(wraps...), "tasks", nil)
	if err != nil {
		return nil, nil, err
	}
	ids, err := prepareMany(ctx, s, n, par)
	return s, ids, err
}

// removeAll deletes every object under e.prefix, 1,000 keys per request.
func (e *env) removeAll(ctx context.Context) error {
	c := e.client()
	in := &s3.ListObjectsV2Input{Bucket: &e.bucket, Prefix: aws.String(e.prefix)}
	for {
		out, err := c.ListObjectsV2(ctx, in)
		if err != nil {
			return err
		}
		if len(out.Contents) > 0 {
			ids := make([]types.ObjectIdentifier, len(out.Contents))
			for i, o := range out.Contents {
				ids[i] = types.ObjectIdentifier{Key: o.Key}
			}
			if _, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &e.bucket, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}}); err != nil {
				return err
			}
		}
		if !aws.ToBool(out.IsTruncated) {
			return nil
		}
		in.ContinuationToken = out.NextContinuationToken
	}
}

// where names what a scenario ran against, for table notes.
func (e *env) where() string {
	if e.srv != nil {
		return "in-process gofakes3"
	}
	return strings.TrimRight(e.endpoint, "/")
}
