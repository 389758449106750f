package main

// Scenario 7: the two designs as fleets of workers: the library's, and an
// emulation of the previous one.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/internal/s3test"
	"github.com/s3task/s3task/internal/s3x"
)

// newFleet runs n workers of the library (each with its own Store and S3
// client, Concurrency 1, reconcile off) on the tasks under sub until stopAt
// claims were won, then stops them; each handler sleeps work. It returns the
// claims won and the tasks completed. onClaim, if set, gets each claim with
// its rank; onComplete each completion.
func newFleet(ctx context.Context, e *fleetEnv, sub string, n, stopAt int, work time.Duration, m *meter, onClaim func(id string, at time.Time, n int64), onComplete func()) (claims, completes int, err error) {
	var won, done atomic.Int64
	enough := make(chan struct{})
	var once sync.Once
	var running []*runningWorker
	defer func() {
		if serr := stopAll(running); err == nil {
			err = serr
		}
		claims, completes = int(won.Load()), int(done.Load())
	}()
	for i := range n {
		ws, err := e.store(e.client(m.wrap), sub, nil)
		if err != nil {
			return 0, 0, err
		}
		w, err := s3task.NewWorker(ws, s3task.HandlerFunc(func(ctx context.Context, _ *s3task.Job) error {
			if work > 0 {
				return s3test.Sleep(ctx, work)
			}
			return nil
		}), &s3task.WorkerOptions{
			ID: fmt.Sprintf("fleet-%d", i), Concurrency: 1, PollInterval: fleetPoll, ReconcileInterval: -1,
			Hooks: s3task.Hooks{
				OnClaim: func(t *s3task.Task) {
					at, n := time.Now(), won.Add(1)
					if onClaim != nil {
						onClaim(t.ID, at, n)
					}
					if n >= int64(stopAt) {
						once.Do(func() { close(enough) })
					}
				},
				OnComplete: func(*s3task.Task) {
					done.Add(1)
					if onComplete != nil {
						onComplete()
					}
				},
			},
		})
		if err != nil {
			return 0, 0, err
		}
		running = append(running, startWorker(ctx, w))
	}
	select {
	case <-enough:
	case <-time.After(10 * time.Minute):
		return 0, 0, fmt.Errorf("%d claims of %d in 10 minutes", won.Load(), stopAt)
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	return 0, 0, nil
}

// oldFleet emulates the workers of the previous design (Concurrency 1):
// each lists every page of the marker folder (active/<id>, newest first),
// shuffles the markers, and visits them in that order: it GETs the record,
// deletes the marker of a finished task (as the previous worker settled
// one), and tries to claim a queued one with a PUT If-Match. A lost claim
// costs a GET more, the re-read by which the library (then as now) settles
// whether its write landed; the worker goes on to the next marker. A won
// claim runs the handler (a sleep of work), writes the completed record
// (PUT If-Match), deletes the marker, and starts over with a new listing.
// It stops once stopAt claims were won, or when a listing is empty.
type oldFleet struct {
	e       *fleetEnv
	prefix  string // the tasks' prefix; markers are under prefix+"active/"
	workers int
	stopAt  int
	work    time.Duration
	m       *meter

	onClaim    func(id string, at time.Time, n int64) // if set, called with each claim and its rank
	onComplete func()                                 // if set, called after each completion

	won, done atomic.Int64
}

func (f *oldFleet) run(ctx context.Context) (claims, completes int, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, f.workers)
	var wg sync.WaitGroup
	for i := range f.workers {
		wg.Go(func() {
			errs[i] = f.worker(ctx, fmt.Sprintf("old-%d", i))
			if errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return int(f.won.Load()), int(f.done.Load()), errors.Join(errs...)
}

func (f *oldFleet) worker(ctx context.Context, id string) error {
	c := f.e.client(f.m.wrap)
	list := f.lister(c)
	dir := f.prefix + "active/"
	for f.won.Load() < int64(f.stopAt) {
		ids, err := list(ctx, dir)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		mrand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		for _, task := range ids {
			won, err := f.visit(ctx, c, id, dir+task, task)
			if err != nil {
				return err
			}
			if won {
				break
			}
		}
	}
	return nil
}

// visit handles one marker; won says this worker claimed and ran the task.
func (f *oldFleet) visit(ctx context.Context, c *s3.Client, worker, key, id string) (won bool, err error) {
	t, etag, err := f.read(ctx, c, id)
	switch {
	case s3x.NotFound(err):
		return false, nil
	case err != nil:
		return false, err
	case t.Terminal():
		return false, f.e.objects(c).Delete(ctx, key)
	case t.Status != s3task.StatusQueued:
		return false, nil
	}
	now := time.Now().UTC()
	t.Status, t.Attempt, t.WorkerID = s3task.StatusRunning, t.Attempt+1, worker
	t.LeaseExpiresAt = now.Add(s3task.DefaultLeaseDuration)
	etag, err = f.write(ctx, c, t, etag)
	if s3x.Lost(err) {
		_, _, err = f.read(ctx, c, id) // the re-read that settles a lost claim
		return false, err
	}
	if err != nil {
		return false, err
	}
	if n := f.won.Add(1); f.onClaim != nil {
		f.onClaim(id, time.Now(), n)
	}
	if f.work > 0 {
		if err := s3test.Sleep(ctx, f.work); err != nil {
			return false, err
		}
	}
	t.Status, t.LeaseExpiresAt = s3task.StatusCompleted, time.Time{}
	if _, err := f.write(ctx, c, t, etag); err != nil {
		return false, err
	}
	err = f.e.objects(c).Delete(ctx, key)
	f.done.Add(1)
	if f.onComplete != nil {
		f.onComplete()
	}
	return true, err
}

// oldRecord is a task record with the write count the library keeps.
type oldRecord struct {
	s3task.Task
	Writes int64 `json:"writes,omitempty"`
}

func (f *oldFleet) read(ctx context.Context, c *s3.Client, id string) (*oldRecord, string, error) {
	body, etag, err := f.e.objects(c).Get(ctx, f.prefix+id+"/status.json")
	if err != nil {
		return nil, "", err
	}
	var t oldRecord
	if err := json.Unmarshal(body, &t); err != nil {
		return nil, "", err
	}
	return &t, etag, nil
}

func (f *oldFleet) write(ctx context.Context, c *s3.Client, t *oldRecord, etag string) (string, error) {
	t.UpdatedAt, t.Revision, t.Writes = time.Now().UTC(), randHex(8), t.Writes+1
	body, err := json.Marshal(t)
	if err != nil {
		return "", err
	}
	out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &f.e.bucket, Key: aws.String(f.prefix + t.ID + "/status.json"),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))), ContentType: aws.String("application/json"),
		IfMatch: aws.String(etag)})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.ETag), nil
}

// lister returns a function that lists every key under a prefix, 1,000 per
// LIST, and returns them without the prefix (a task ID is a third of a
// marker's key: 100,000 of them in each of 16 workers add up). Against the in-process server it sends the LISTs as plain HTTP
// requests through the same counted transport and picks the keys out of the
// XML by hand: the SDK's XML decoding of a 1,000-key page costs more CPU than
// the server's answer, and the previous design at 100,000 tasks reads tens of
// thousands of pages. The requests are the same; only the client is lighter.
func (f *oldFleet) lister(c *s3.Client) func(ctx context.Context, prefix string) ([]string, error) {
	if f.e.srv == nil {
		return func(ctx context.Context, prefix string) ([]string, error) {
			var keys []string
			in := &s3.ListObjectsV2Input{Bucket: &f.e.bucket, Prefix: &prefix}
			for {
				out, err := c.ListObjectsV2(ctx, in)
				if err != nil {
					return nil, err
				}
				for _, o := range out.Contents {
					keys = append(keys, strings.TrimPrefix(aws.ToString(o.Key), prefix))
				}
				if !aws.ToBool(out.IsTruncated) || len(out.Contents) == 0 {
					return keys, nil
				}
				in.StartAfter = out.Contents[len(out.Contents)-1].Key
			}
		}
	}
	hc := f.e.httpClient(f.m.wrap)
	return func(ctx context.Context, prefix string) ([]string, error) {
		var keys []string
		after := ""
		for {
			q := url.Values{"list-type": {"2"}, "prefix": {prefix}, "max-keys": {"1000"}}
			if after != "" {
				q.Set("start-after", after)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.e.endpoint+"/"+f.e.bucket+"?"+q.Encode(), nil)
			if err != nil {
				return nil, err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return nil, err
			}
			body, err := s3test.ReadAll(resp.Body, nil)
			if err != nil {
				return nil, err
			}
			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("LIST %s: %s", prefix, resp.Status)
			}
			page := xmlKeys(body, prefix)
			keys = append(keys, page...)
			if len(page) == 0 || !bytes.Contains(body, []byte("<IsTruncated>true</IsTruncated>")) {
				return keys, nil
			}
			after = prefix + page[len(page)-1]
		}
	}
}

// xmlKeys returns the contents of the <Key> elements of a ListObjectsV2
// answer, without prefix. Task and marker keys hold no character XML
// escapes.
func xmlKeys(body []byte, prefix string) []string {
	var keys []string
	open, end := []byte("<Key>"+prefix), []byte("</Key>")
	for {
		i := bytes.Index(body, open)
		if i < 0 {
			return keys
		}
		body = body[i+len(open):]
		j := bytes.Index(body, end)
		if j < 0 {
			return keys
		}
		keys = append(keys, string(body[:j]))
		body = body[j+len(end):]
	}
}
