package sim

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/s3task/s3task"
)

// ingestFolder is where the partner of a world with Config.Ingest puts its
// files.
const ingestFolder = "incoming/"

// md5hex is the ETag S3 gives an object written in one request.
func md5hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// startIngesters starts two Ingester processes of the folder, each fed
// every event, each sweeping every two minutes, until the world shuts down.
func (w *World) startIngesters() error {
	for i := range 2 {
		name := fmt.Sprintf("i%d", i+1)
		p, err := w.newProc(name)
		if err != nil {
			return err
		}
		in, err := s3task.NewIngester(p.store, &s3task.IngestOptions{
			Prefix:        ingestFolder,
			SweepInterval: 2 * time.Minute,
			Logger:        w.log,
			Params: func(o s3task.Object) s3task.CreateParams {
				// The task's name draws its handler runs' plans; its type
				// is one of the world's.
				etag := strings.Trim(o.ETag, `"`)
				return s3task.CreateParams{Name: "ingest/" + o.Key + "/" + etag, Type: simTypes[int(etag[0])%len(simTypes)]}
			},
		})
		if err != nil {
			return err
		}
		p.ingester = in
		ctx, cancel := context.WithCancel(context.Background())
		w.mu.Lock()
		w.ingesters = append(w.ingesters, p)
		w.mu.Unlock()
		w.wg.Go(func() {
			<-w.over
			cancel()
		})
		w.wg.Go(func() { _ = in.Run(ctx) })
	}
	return nil
}

// partner puts files under the folder over the arrivals: some get a new
// version later, some are deleted. Its requests meet the adversary like
// everyone's; a write that fails is not tried again.
func (w *World) partner(p *proc, until time.Time) {
	type step struct {
		at   time.Time
		key  string
		body string // "" deletes
	}
	var steps []step
	start := time.Now()
	files := 6 + p.rng.IntN(10)
	for i := range files {
		key := fmt.Sprintf("%sfile-%d.csv", ingestFolder, i)
		at := start.Add(p.rng.Dur(0, until.Sub(start)))
		steps = append(steps, step{at, key, fmt.Sprintf("file %d, version 1\n", i)})
		switch r := p.rng.Float64(); {
		case r < 0.3:
			steps = append(steps, step{at.Add(p.rng.Dur(time.Second, 5*time.Minute)), key, fmt.Sprintf("file %d, version 2\n", i)})
		case r < 0.4:
			steps = append(steps, step{at.Add(p.rng.Dur(time.Second, 5*time.Minute)), key, ""})
		}
	}
	sortSteps := func(a, b step) int { return a.at.Compare(b.at) }
	slices.SortFunc(steps, sortSteps)
	ctx := context.Background()
	for _, s := range steps {
		if !w.sleep(time.Until(s.at)) {
			return
		}
		if s.body == "" {
			_ = p.raw.Delete(ctx, s.key)
		} else {
			_, _ = p.raw.Put(ctx, s.key, []byte(s.body))
		}
	}
}

// ingestSettled reports whether every file under the folder has a task
// whose source is its current version, read without requests.
func (w *World) ingestSettled(keys []string) bool {
	want := map[string]string{} // file -> its current ETag
	for _, key := range keys {
		if strings.HasPrefix(key, ingestFolder) {
			if body, ok := w.mem.Object(key); ok {
				want[key] = md5hex(body)
			}
		}
	}
	if len(want) == 0 {
		return true
	}
	for _, key := range w.mem.Keys(w.prefix) {
		if !strings.HasSuffix(key, "/status.json") {
			continue
		}
		body, ok := w.mem.Object(key)
		if !ok {
			continue
		}
		var t struct {
			Metadata map[string]string `json:"metadata"`
		}
		if json.Unmarshal(body, &t) == nil && want[t.Metadata[s3task.MetaSourceKey]] == t.Metadata[s3task.MetaSourceETag] {
			delete(want, t.Metadata[s3task.MetaSourceKey])
		}
	}
	return len(want) == 0
}
