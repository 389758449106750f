// Package s3task runs low-volume, file-shaped background work with one S3
// bucket as its only infrastructure: no database, no queue service.
//
// A user uploads a file, a worker processes it in the background, the user
// downloads the result. Each task is a folder of objects: the input, one
// output per attempt, and a small status.json that is the task's whole state.
// Workers on any number of machines find work by listing small marker
// objects and claim it with S3 conditional writes.
//
// It fits workflows of roughly a handful to a few thousand tasks a day, where
// pickup within seconds is fine and an operator page only needs the newest
// tasks. It is not a replacement for a queue under high throughput, nor for
// a database when tasks must be filtered or sorted in arbitrary ways.
//
// # Object layout
//
// Under a prefix (default "batch-tasks/"):
//
//	batch-tasks/<id>/status.json              the record: the only source of truth
//	batch-tasks/<id>/input<ext>               the uploaded input
//	batch-tasks/<id>/output-attempt-<n><ext>  the output of attempt n, never overwritten
//	batch-tasks/active/<due>_<id>             marker: "this task needs a worker from <due>"
//	batch-tasks/_keys/<sha256 of key>         the task an idempotency key names (CreateParams.Key)
//	batch-tasks/_wake, batch-tasks/_reconciler  the latest announcements for idle workers; the fleet's reconciler lease
//	batch-tasks/_paused                       the paused task types (Store.Pause), also copied into _wake
//	batch-tasks/_check/<id>                   the probe Store.CheckBackend writes, deleted when it ends
//	batch-tasks/_workers/<name>.json          a running worker's presence object (Store.Workers)
//
// Every name under the prefix that is not a task's folder starts with
// "active/" or '_', which no task ID does, so a listing of tasks passes
// over them. A presence object's <name> is its worker's ID when that is
// made of ASCII letters, digits, '.', '-' and '_' only (and does not start
// with '.'), and "~" and the ID's bytes in lowercase hex otherwise: one key
// per worker, and the key alone names it.
//
// Task IDs are ULIDs whose time field is inverted ((2^48-1) - unix_ms), so
// S3's ascending listing shows the newest task first. See [NewID]. Marker
// names start with the time the task needs a worker from (Task.DueAt, by the
// server's clock, as 20261130T144702.123Z), so the same listing shows the
// marker folder oldest first: the queue in the order it should be served.
//
// # Lifecycle
//
//	created ──submit──▶ queued ──claim──▶ running ──▶ completed
//	                      ▲                  │
//	                      │                  ├──▶ failed ──(retry due, or Store.Retry)──▶ queued/running
//	                      └─lease expired────┤
//	                      └─shutdown─────────┘
//	created, queued, running, failed ──cancel──▶ abandoned
//
// completed and abandoned are terminal; failed is terminal once no retry is
// scheduled (Task.RetryAt is zero) — because attempts ran out or the handler
// returned a [Permanent] error — until an operator calls [Store.Retry].
// [Task.State] tells the parts of a status apart: a queued task is
// scheduled (its RunAt still to come) or ready, a failed one retrying or
// dead (failed for good), and [ListOptions.States] lists by it. One
// pure function decides every transition; the [Store] and the [Worker] only
// read the record, ask it, and write the answer back.
//
// # Setting up
//
// The code snippets from here on are taken from the package's examples,
// the Example functions shown with [NewStore], [Store.CreateForUpload],
// [Worker], [HandleJSON] and the other names they illustrate. Each example
// is a complete program on an in-process S3, and go test runs it and
// checks what it prints, so the snippets are known to work.
//
// The application builds the S3 client, typically s3.NewFromConfig on the
// configuration it loads with the AWS SDK's config package; the library
// never loads credentials or reads the environment. A [Store] is made on
// that client and a bucket, and [Store.CheckBackend], run once at
// start-up, proves the bucket enforces conditional writes:
//
//	store, err := s3task.NewStore(client, bucket, &s3task.StoreOptions{
//		Prefix: "reports/", InputExt: ".csv", OutputExt: ".csv",
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	if _, err := store.CheckBackend(ctx); err != nil {
//		log.Fatal(err) // the bucket does not enforce conditional writes
//	}
//
// For S3-compatible stores (MinIO, Ceph, R2, versitygw...) use path-style
// addressing and set the client's RequestChecksumCalculation to "when
// required".
//
// # The control side
//
// The application's own HTTP handlers call the Store. Files never pass
// through the service: uploads and downloads go straight to S3 with
// presigned URLs. [Store.CreateForUpload] creates a task and presigns the
// upload of its input; once the client has uploaded, [Store.Submit] checks
// the input is there and not too large, and queues the task:
//
//	task, up, err := store.CreateForUpload(ctx, s3task.CreateParams{
//		Name: "June import", Type: "csv_import", CreatedBy: "ada",
//	}, 15*time.Minute)
//	// up.Form is a size-capped POST form for a browser; up.Put a plain PUT.
//	// ... once the client says it is done:
//	task, err = store.Submit(ctx, task.ID)
//
// From there the application reads and steers its tasks: [Store.List]
// pages through them newest first with an opaque cursor, [Store.Get] reads
// one, [Store.Cancel] abandons one, [Store.Retry] queues a failed one
// again, [Store.Schedule] moves its start, and [Store.PresignDownload] (or
// [Store.OpenOutput]) hands out the output of a completed one. A producer
// that holds the input itself (a cron job, another service) queues a task
// in one call with [Store.Enqueue], which creates it, uploads the input
// and submits it; with a Key a retry after a crash finishes what the first
// call began. A task type declared without input ([FileOptions.NoInput])
// is enqueued with none:
//
//	task, err := store.Enqueue(ctx, s3task.CreateParams{Type: "csv_import", Key: eventID}, bytes.NewReader(csv))
//
// [Store.Create] and [Store.UploadInput] do the same in steps, and
// [Store.PresignUpload] and [Store.PresignUploadForm] sign again for a
// created task.
//
// Every ID that comes from outside is validated before it becomes part of an
// object key ([ErrInvalidID]); nothing like "../x" or "active" can address
// another object.
//
// # Creating a task once
//
// A request can arrive twice: a double click, a client that resends after
// a timeout, an upstream event delivered again. [CreateParams.Key] makes
// Create idempotent: every Create with the same key returns the task the
// first one made, for as long as that task exists (until [Store.Purge]
// removes it). A form's submission token or an upstream event ID makes a
// good key:
//
//	p := s3task.CreateParams{Name: "June import", Type: "csv_import", Key: "upload-form-7f3a9c"}
//	first, err := store.Create(ctx, p)
//	// The same request again, say a retry after a timeout:
//	again, err := store.Create(ctx, p) // again.ID == first.ID
//
// The key decides alone: a later call's other parameters are not compared.
// The key has an object of its own, created with If-None-Match: *, that
// names its task. A keyed Create costs one PUT more than a plain one; a
// repeat costs one refused PUT and two GETs, and writes nothing. At no
// time do two live tasks share a key, even when Creates race with each
// other, with crashes between a key's object and its task's record, and
// with Purge: Purge keeps a keyed task until 10 minutes after its key was
// written and leaves the key's object behind (at most 26 bytes) for the
// next Create with that key to take over. [CreateParams.Key] gives the
// exact rules and the one assumption they rest on (S3 applies a request
// within a minute of its being sent, or never).
//
// # The worker side
//
// A [Worker] runs a [Handler] for each task it claims. A [Mux] routes each
// task to the handler registered for its type (Task.Type); its zero value is
// ready to use, and a *Mux is itself the Handler to give to [NewWorker]:
//
//	var mux s3task.Mux // the zero value is ready to use
//	err := mux.HandleFunc("shout", func(ctx context.Context, job *s3task.Job) error {
//		in, err := job.OpenInput(ctx)
//		if err != nil {
//			return err
//		}
//		defer in.Close()
//		out, err := job.CreateOutput(ctx)
//		if err != nil {
//			return err
//		}
//		// ... read from in, write to out, call job.SetProgress now and then;
//		// on an error, out.Discard() and return it.
//		return out.Close()
//	})
//	worker, err := s3task.NewWorker(store, &mux, &s3task.WorkerOptions{Concurrency: 2})
//	go worker.Run(ctx) // returns once stopped and its running tasks are settled
//	// ... at shutdown, bound the wait:
//	err = worker.Stop(stopCtx)
//
// Progress reaches the record with each heartbeat and with the result:
// the row counters of [Job.SetProgress], and the job's own counters of
// [Job.SetCounter] (pages rendered, images resized), which the record keeps
// in Task.Counters.
//
// A handler returns nil to complete its task, or an error to fail the
// attempt (see Failures below). A Submit through the same Store wakes a
// Worker of the same process at once; other workers notice within
// WorkerOptions.PollInterval.
//
// Where the bucket sends S3 event notifications (AWS to SQS or Lambda;
// versitygw, MinIO and Ceph to a webhook or a message broker), give them to
// [Worker.Notify], for example through package s3event's webhook handler:
// a worker told that a task's marker was written reads that task's record
// and claims it, with no LIST, a round trip after the Submit. Events are
// hints, checked against the record, so duplicates, losses and reordering
// cost at most a GET or a wait for the next poll; with them the polling is
// a safety net and can be slow (PollInterval of minutes):
//
//	worker, err := s3task.NewWorker(store, &mux, &s3task.WorkerOptions{
//		PollInterval: 2 * time.Minute, MaxPollInterval: 10 * time.Minute,
//	})
//	hook, err := s3event.NewHandler(worker, &s3event.HandlerOptions{Token: token})
//	http.Handle("/s3-events", hook) // the URL the S3 server posts to
//
// # Typed payloads
//
// A task carries a small JSON payload for its handler. [HandleJSON]
// registers a handler that gets it decoded into a Go type, and
// [CreateParams.Args] encodes one. A type with a Validate method (a
// [Validator]) is checked on both sides: Create refuses invalid arguments
// with [ErrInvalidArgument], and the handler is not called on an invalid
// payload:
//
//	type resizeParams struct {
//		Width  int `json:"width"`
//		Height int `json:"height"`
//	}
//
//	func (a resizeParams) Validate() error { ... } // optional
//
//	err := s3task.HandleJSON(&mux, "resize", func(ctx context.Context, job *s3task.Job, args resizeParams) error {
//		fmt.Printf("resizing %s to %dx%d\n", job.Task.Name, args.Width, args.Height)
//		return nil
//	})
//	// The producer passes the arguments as a value:
//	task, err := store.Create(ctx, s3task.CreateParams{
//		Name: "avatar", Type: "resize", Args: resizeParams{Width: 64, Height: 64},
//	})
//
// A payload that does not decode into the type, or is not valid, fails its
// task permanently with the category [CategoryBadPayload], whatever
// attempts are left. Decoding is as lenient as encoding/json: fields the
// type does not know are ignored, so producers may add fields before every
// worker knows them.
//
// An argument type with a TaskType method (a [TaskArgs]) names its task
// type, so the string is written once: [HandleArgs] registers the handler
// under it and Create takes CreateParams.Type from the Args. A Store told
// the types its fleet serves (StoreOptions.Types, from [Mux.Types])
// refuses any other type at Create, a misspelt or an empty one, with
// [ErrUnknownTaskType]:
//
//	func (resizeParams) TaskType() string { return "resize" }
//
//	err := s3task.HandleArgs(&mux, resize)
//	store, err := s3task.NewStore(client, bucket, &s3task.StoreOptions{Types: mux.Types()})
//	task, err := store.Create(ctx, s3task.CreateParams{Args: resizeParams{Width: 64, Height: 64}})
//
// # Which worker takes which task
//
// A handler that lists the types it serves is a [TypedHandler], and a *Mux
// is one. A worker whose handler is a TypedHandler claims only those types;
// a task of any other type stays queued, untouched, until a worker that
// serves it comes. So in a rolling deploy, tasks of a type the old workers
// do not know wait for the new ones, and [Stats] counts them by type
// meanwhile:
//
//	var old s3task.Mux
//	err := old.HandleFunc("resize", resize)  // this worker knows "resize" only
//	worker, err := s3task.NewWorker(store, &old, nil)
//	// ... a "watermark" task submitted now waits:
//	st, err := store.Stats(ctx, s3task.StatsOptions{})
//	fmt.Println(st.UnfinishedByType) // map[watermark:1]
//
// A handler that is not a TypedHandler, such as a [HandlerFunc], is offered
// every task. A Mux wrapped by hand in such a handler fails a task of a
// type it lacks permanently, with [ErrUnknownTaskType] and the category
// [CategoryUnknownType]; wrap it through WorkerOptions.Middleware instead,
// which leaves the choice of tasks to the Mux.
//
// # Failures
//
// A handler's error fails the attempt. A plain error is retried after
// WorkerOptions.Backoff while attempts are left (CreateParams.MaxAttempts,
// three by default); [Permanent] marks an error no retry can fix, and
// [RetryAfter] asks for a wait of its own. [WithCategory] labels a failure;
// the worker records the label in the task's error_category, and
// [Store.Stats] and the worker's [Hooks] group failures by it. They
// combine:
//
//	return s3task.Permanent(s3task.WithCategory(errors.New("row 2: no email"), "bad_input"))
//	return s3task.RetryAfter(s3task.WithCategory(errors.New("CRM answered 503"), "upstream"), time.Minute)
//
// A failure the handler did not label gets one of the library's
// categories: [CategoryTransient] for a plain error, [CategoryPermanent]
// for a Permanent one, [CategoryPanic] for a panic, [CategoryBadPayload]
// and [CategoryUnknownType] as above, and, for attempts that ended without
// the handler's word, [CategoryLeaseExpired] (its worker stopped renewing
// the lease) and [CategoryShutdown] (its worker shut down), or
// [CategoryTimeout] when it was given back more times in a row than
// WorkerOptions.ReleaseLimit allows. A task whose attempts ran out, or
// that failed permanently, stays failed until an operator calls
// [Store.Retry].
//
// The record's last_error and error_category describe the latest failure
// only. [Task.History] keeps the latest [HistoryLimit] attempts: for each,
// the worker that claimed it, its start and end, its [AttemptOutcome]
// (completed, failed, its lease expired, released on shutdown, cancelled
// while it ran) and its error, cut to [HistoryErrorLimit] bytes. The claim
// and the write that ends an attempt carry it, so it costs no request,
// and the record grows by a few hundred bytes per attempt until the
// history is full.
//
// # Metadata and middleware
//
// A task can carry the host's own context, set at create time and kept
// unchanged through every attempt and Retry: [CreateParams.Metadata], a
// small map of strings (a tenant, the ID of the request that made it, a
// trace context), which handlers read in Job.Task.Metadata and operators
// in the record. [Middleware] wraps every attempt's handler, as net/http
// middleware wraps a handler, and [StoreMiddleware] wraps the Store's
// calls, reads and writes alike, with the task's record at hand
// ([Call.Task]) and a listing's filters ([Call.List]), so a tenant check is
// written once; both are listed outermost first:
//
//	report := func(next s3task.Handler) s3task.Handler {
//		return s3task.HandlerFunc(func(ctx context.Context, job *s3task.Job) error {
//			err := next.Work(ctx, job)
//			log.Printf("tenant %s, task %s, attempt %d: %v", job.Task.Metadata["tenant"], job.Task.ID, job.Task.Attempt, err)
//			return err // what the outermost returns is what the worker records
//		})
//	}
//	worker, err := s3task.NewWorker(store, &mux, &s3task.WorkerOptions{Middleware: []s3task.Middleware{report}})
//
// Package [github.com/s3task/s3task/s3taskotel], a module of its own, is
// such a pair of middleware for OpenTelemetry: it keeps the creating
// request's trace context in the task's metadata, so each attempt's span
// joins the trace of the request that made the task, and it meters
// attempts, queue wait, lease losses and polls.
//
// # Running one task now
//
// [Worker.RunTask] claims a given task at once and runs the worker's
// handler on it, synchronously, whether or not Run is running, then
// returns the record as the attempt left it. It suits work an application
// wants done on demand, and tests:
//
//	worker, err := s3task.NewWorker(store, &mux, nil)
//	task, err = worker.RunTask(ctx, task.ID) // task.Status is completed, or failed
//
// A task that is not due (not yet submitted, scheduled for later, waiting
// for a retry, running under a live lease, or finished) is refused with a
// *[TransitionError], and one of a type the handler does not serve with
// [ErrUnknownTaskType].
//
// # Testing your handlers
//
// Package [github.com/s3task/s3task/s3tasktest] runs the library in a test,
// on an in-process S3 that needs no network and no credentials: a Store in
// one call, a task submitted in one more, and one attempt run
// synchronously, with the handler's error and the output to check:
//
//	func TestCountWords(t *testing.T) {
//		var mux s3task.Mux
//		if err := s3task.HandleJSON(&mux, "count", countWords); err != nil {
//			t.Fatal(err)
//		}
//		store := s3tasktest.NewStore(t, nil)
//		task := s3tasktest.Submit(t, store, s3task.CreateParams{Type: "count", Args: countArgs{Min: 2}}, []byte("to be or not"))
//		res := s3tasktest.Run(t, store, &mux, task.ID)
//		if res.Err != nil || string(res.Output) != "4" {
//			t.Errorf("got error %v, output %q", res.Err, res.Output)
//		}
//	}
//
// countWords is the handler under test, a func(ctx, *s3task.Job, countArgs)
// error; the example of s3tasktest.Run, which that package runs as a test,
// has it whole.
// s3tasktest.Drain works the whole queue as a worker would, and the S3's
// Advance moves its clock, so a retry falls due without waiting.
//
// # Guarantees, and how they are kept
//
// Compare-and-set. Every change of a record is a GET (body and ETag), a
// decision, and a PUT with If-Match; a record is created with
// If-None-Match: *. A writer whose ETag is stale (an expired lease, a
// cancelled task) can never overwrite newer state. Operator calls re-read and
// re-decide after a lost race, up to StoreOptions.ConflictRetries times,
// then return [ErrConflict]; a worker that loses a claim moves on.
//
// Ambiguous outcomes. The SDK resends a PUT after a timeout or a 5xx even if
// the first one was applied, and the resend then fails its precondition.
// Every write carries a fresh random revision, the record's write count and
// the revisions of the eight writes before it. After any doubtful answer the
// library re-reads the record (with backoff, for up to 30 seconds) and knows
// whether its write landed, even when others wrote after it: a write that
// landed is a success, one that did not is reported as such with the record
// unchanged. When more than eight writes followed (a running task's
// heartbeats), Submit, Retry, Cancel and Schedule decide again against the
// record as read: a state their write leads to counts as the change made,
// and any other is decided afresh, as after a lost compare-and-set; Pause
// and Resume read both their objects again and do the same. Only when the
// record cannot be read back in time (30 seconds, or the call's context),
// or is gone, does a call return [ErrOutcomeUnknown] (a keyed Create and
// Purge also when more writes followed than the record remembers); it
// never reports a failure for a change it made, but in the one state per
// call the record cannot settle, documented on the call. The revision also
// keeps two identical bodies from sharing an ETag.
//
// Leases. A claim writes status running, worker_id and lease_expires_at; the
// worker renews the lease every WorkerOptions.HeartbeatInterval and the
// renewal carries progress. If a renewal loses its compare-and-set, the
// handler's context is cancelled with [ErrTaskCanceled] (an operator
// cancelled the task) or [ErrLeaseLost] (someone else has it), and that
// attempt writes nothing more. Lease expiry is judged by the S3 server's
// clock, learned from the Date header of its responses: another worker takes
// a task over only WorkerOptions.ClockMargin after its lease's end, and the
// holder stops trusting its lease ClockMargin before that end. At that
// deadline, whatever the phase of its renewals, the handler's context ends
// with [ErrLeaseLost] and a renewal still in flight is abandoned. A worker
// estimates the server's clock within what the Date headers allow (its own
// clock while they allow it, their least once they rule it out), judges
// whether a start or a retry has come by the least they allow, so that it
// never claims a task early (but for the spread of S3's own clocks), and
// judges its own deadline by the most they allow. A marker's name is the
// time its task needs a worker by the reading of the process that wrote
// it, so a worker visits a marker named within ClockMargin of its own
// reading at once and lets the record decide: a task queued for now is
// not held back because the producer's reading leads the worker's. So no two handlers
// of one task run at once as long as the holder's lag behind the server's
// clock, plus the spread of S3's clocks, stays under twice ClockMargin. The
// lag adds up the one-second resolution of the Date header, the delay of
// the answer that last set the estimate, the spread of S3's clocks, and
// any time the holder's process stood still (a GC pause, a suspended VM)
// across its deadline. With the default margin of 5 seconds that is
// 10 seconds less twice the spread; the simulation puts it to the test
// with answers up to 1.5 seconds late, clocks a quarter of a second apart
// and freezes of up to 6.5 seconds at the lease's end.
//
// Attempts and outputs. Attempt n writes only output-attempt-n, created with
// If-None-Match: *, so a late attempt can never overwrite a newer one's output,
// and an attempt's output becomes the task's only if its completion wins the
// compare-and-set. Once the handler's context has ended, [Job.WriteOutput]
// writes nothing, and an upload under way is cancelled. Attempts are capped
// by max_attempts; the wait between them is recorded in the record
// (retry_at), never slept in a goroutine. An attempt is used up by a handler
// that started, or by a worker that crashed or stayed cut off from S3 while
// it held the claim; a claim whose answer was lost is settled by re-reading
// within the lease before it is given up.
//
// Shutdown. A worker that shuts down lets its handlers finish for
// WorkerOptions.ShutdownTimeout, then cancels their contexts with
// [ErrWorkerStopping]; it keeps renewing their leases until they return,
// then gives the tasks back to the queue. A given-back attempt is counted in
// released_attempts, apart from the cap ([Task.AttemptsUsed]), so shutdown
// never uses up an attempt and never raises max_attempts. [Worker.Stop]
// bounds the wait.
//
// A stalled S3, one that accepts connections but stops answering, never
// wedges a worker: each of its requests has a deadline. A request of the
// poll loop (the wake object's GET, the LIST, a record's GET, a
// marker's DELETE), a record read of the notifier and the wait for the
// answer to [Job.OpenInput]'s GET are given up after a third of the lease
// (HeartbeatInterval; at least PollInterval and one second), and the loop
// tries again at its next poll. A renewal is given up at the lease's
// deadline, where the handler's context ends with [ErrLeaseLost], so
// another worker recovers the task once S3 answers again. A claim, an
// attempt's final write and the notifier's record of a notice are given up
// within a lease; an output's upload ends with the handler's context.
// [Worker.Stop] returns by its ctx's end, cutting short a claim under way;
// Run returns at most about a lease after that.
//
// Temporary files. What a handler writes through [Job.CreateOutput], and a
// reader that cannot seek given to [Job.WriteOutput] or
// [Store.UploadInput], is spooled to a file named s3task-* in
// StoreOptions.SpoolDir (the system's temporary folder by default). On
// Unix it is unlinked as soon as it is created, so even a killed process
// leaves nothing behind; elsewhere it is removed when closed, and a worker
// that starts running removes such files older than [SpoolStaleAfter].
//
// Inputs. The presigned PUT and [Store.UploadInput] create the input with
// If-None-Match: *, so the bytes Submit verified are the bytes a worker
// reads; a worker still compares the input's ETag and fails the attempt with
// [ErrInputChanged] on a store that let it be replaced, and [Store.Retry]
// verifies the input again.
//
// Markers. A marker is an index, never the truth. Each phase of a task that
// needs a worker has a marker of its own, named after when it needs one:
// a queued task's submit time (or the RunAt it was scheduled for), a failed
// task's retry time, a running task's lease end plus ClockMargin. A change of
// phase writes the new marker before the record and deletes the old one
// after it, so a task that needs a worker is never without a marker, and
// deleting the marker of a phase that is over can never delete the next
// one's. A worker lists the marker folder from its head, where the markers
// due first are, and serves them oldest first, a few at a time per free
// slot, going on to the next few, and to the next page, while those
// started nothing, and stops at the first marker not yet due, whose time
// tells it when to look again. Workers polling at once must not all reach
// for the same task: a worker alone takes each few in random order; one
// that met others in the head (a task it went for taken by another)
// lists the presence objects once, ranks itself for each task among the
// workers it found, by a hash every worker computes alike, and takes the
// tasks it ranks first for, so that each worker of a fleet takes tasks of
// its own. With none of its own left in the head it helps with the
// others', leaving a worker's last task to it for a PollInterval. A visit that failed for a
// passing reason (a read or a claim that S3 did not answer) is tried again
// at the next poll, a PollInterval later. The holder of
// a running task moves its marker on to the end of the lease about once a
// lease, so polls never meet a live task. The cost of a poll depends on the
// page, never on the length of the queue: one LIST. Workers delete stale
// markers as they meet them. Conditional DELETE is not relied on.
//
// Delayed start. [CreateParams.RunAt] or [Store.Schedule] holds a task back
// until a time by the server's clock: it is queued, [Task.Scheduled], and no
// worker claims it before then. Its marker is named after that time, so it
// costs nothing while it waits, and a worker that saw it in its last
// listing lists again when it falls due. Schedule with a zero time runs it
// now; Cancel works as for any queued task. See [Store.Schedule] for an
// example.
//
// Periodic tasks. [StoreOptions.Periodic] declares tasks the fleet makes on
// a [Schedule] ([Every], [Daily], [Weekly]): the worker holding the
// reconciler lease makes one task per period, keyed by the period's start,
// so a period has one run however the lease moves; [MissedRuns] says what
// becomes of the runs of a period in which no worker held it. Their type is
// declared without input ([FileOptions.NoInput]). [Store.Periodics] shows
// the next run and the last one's task.
//
// Bad records. A status.json with a newer schema_version is refused with
// [ErrUnsupportedSchema] and never rewritten; a corrupt one is reported as a
// *[RecordError] naming its key. Neither stops a worker or hides other tasks
// from [Store.List]. Its marker stays; a worker that meets it reads the
// record again only 10 minutes later, and goes on past it in the same
// poll, page after page, so any number of them delay no task behind them
// beyond that poll; each costs a GET every 10 minutes per worker that
// meets it. [Store.Reconcile] reports them (ReconcileReport.Broken), to be
// mended or deleted.
//
// # When S3 or the network misbehaves
//
// What the library does under each kind of fault (the reliability tests
// inject every one of them):
//
//   - A 5xx or 503 SlowDown answer, or a connection reset before the
//     request reached S3: the SDK's retryer sends it again, with backoff.
//     If it keeps failing, the call returns the error; a worker logs it and
//     tries again at its next poll or heartbeat.
//   - A response lost after S3 applied the request (a timeout, a reset on
//     the way back): the retry of a conditional write then fails its
//     precondition. The library re-reads the record and compares the
//     revision it wrote (see Ambiguous outcomes above). An input or output
//     written twice this way is recognised by a token in its metadata. A
//     claim whose answer was lost is settled by re-reading with backoff
//     within the lease; only if that fails too is the task left to be
//     recovered as a new attempt when its lease expires.
//   - Latency, or a worker cut off or paused: leases are judged by the
//     server's clock with WorkerOptions.ClockMargin, failed renewals are
//     retried with backoff, and a worker whose renewals keep failing cancels
//     its handler with [ErrLeaseLost] at its deadline, so a slow or cut-off
//     worker never runs on once another may take over.
//   - A marker write or delete that fails: markers are only an index. A
//     missing marker is restored by [Store.Reconcile], which workers run on
//     their own; a stale one is removed by the next worker that visits it.
//
// # Operating it
//
// The records are the truth and everything else can be rebuilt from them:
//
//   - [Task.Silent] tells that a running task's worker has not written
//     its record for two of its heartbeat intervals (the claim records the
//     interval): the worker may have died, and [Task.RecoversAt] says when
//     another takes the task over.
//   - [Store.Stats] counts tasks by status, counts the unfinished ones by
//     type, finds the task that has waited longest for a worker since it
//     fell due (Stats.OldestWaiting, the figure to alert on) and groups
//     failures by error_category, within a bound on the records it reads. A queue that looks empty because all went well, because markers
//     were lost, or because failures piled up looks different here.
//   - [Store.Reconcile] repairs the marker index: it restores the markers of
//     tasks that need a worker and removes stale ones, changing no record.
//     Workers run it on their own, one for the whole fleet: every
//     WorkerOptions.ReconcileInterval each worker asks for the reconciler
//     lease (one GET), and only its holder reconciles, over the tasks created
//     in the last two intervals and the older ones it found waiting for a
//     worker (read again if their marker changed or is not yet due), and
//     over the whole ReconcileWindow at its first turn and every 24th; a
//     turn an error cut short is tried again within minutes. A holder that
//     stops hands the lease back, and one that dies is replaced an interval
//     and a quarter after its last turn: a lost marker is restored within
//     one interval while the holder lives, and within two and a quarter
//     when it dies (an interval and a quarter more for each next holder
//     that dies before its turn ends).
//   - [Store.Workers] lists the workers: each running [Worker] keeps a
//     small presence object (its ID, host, concurrency, the types it
//     claims, the tasks it holds, when it started and last polled),
//     written when Run starts and every WorkerOptions.PresenceInterval (2
//     minutes by default) apart from its poll loop, and deleted when Run
//     returns. A worker is live while its object was written within two
//     intervals plus ClockMargin, by the server's clock; one killed
//     without a Stop shows as not live until the fleet's reconciler
//     deletes its object, [PresenceStaleAfter] (24 hours) after its last
//     write. A presence write that fails is logged and delays nothing.
//   - [Store.Purge] deletes finished tasks older than a cutoff, record last,
//     never one that is queued, running or waiting for a retry, nor one
//     changed less than a minute ago (a late write may still land).
//   - [Store.RetryMany], [Store.CancelMany] and [Store.PurgeMany] act on a
//     selection: task IDs (from a user interface, at most [MaxBulkIDs]) or
//     the filters of List (statuses, states, types, metadata), such as
//     every failed task of one type, or every dead one ([StateDead]),
//     leaving those that wait for their retry alone. A dry run (BulkOptions.DryRun) reports what would
//     be done and writes nothing. One call acts on at most Limit tasks,
//     [BulkConcurrency] at a time, scans at most MaxScan task folders, and
//     returns a cursor to go on from. Each task goes through the single
//     call's code and the Store middleware (OpRetry, OpCancel, [OpPurge]),
//     is decided against its record as it is then, and is reported: done,
//     skipped with the reason (a Retry of a task that is not failed, a
//     Cancel of a finished one, a purge Purge would not make, a task no
//     longer in the states selected), or failed with the error. The
//     [BulkReport] encodes to JSON as a host's API would answer it.
//   - [Store.Pause] stops workers from claiming the tasks of one type (say
//     while the service their handler calls is down); running attempts
//     finish, new tasks of the type wait, queued, and [Store.Resume] lets
//     them run, announcing them as a Submit does. Every worker sees a
//     pause within its PollInterval, at no request more per poll: the
//     paused types ride in the wake object it already reads. [Store.Paused]
//     lists them. Only workers of this version and later honour a pause
//     (see Pause for a fleet being upgraded).
//   - StoreOptions.OnTerminal tells the host when a task finishes, at least
//     once, so clients need not poll. A worker delivers notices on a
//     goroutine of their own, retrying a failed one with backoff (5 seconds
//     doubling to 10 minutes), so a slow or failing hook delays no claim. Worker [Hooks] report claims,
//     completions, failures (with their category), lost leases, releases,
//     polls and reconcile runs, enough to feed metrics.
//
// The example of [Store.Reconcile] shows Stats and Reconcile at work on a
// lost marker.
//
// # Requests per call
//
// Create: 1 PUT; with a Key, 2 PUTs (the key's object, then the record),
// and a repeat of a key that names a task already: 1 refused PUT and 2
// GETs. Get: 1 GET. Submit: GET, HEAD, then PUTs of the marker and
// the record, and a PUT of the wake object (with a GET before it, the
// first time a Store writes it, and while another process writes it too;
// a refused PUT more when another process wrote it since this Store's
// last write). Cancel: GET, PUT, and a DELETE of the marker
// of a task that had one; with an OnTerminal hook, a PUT of a marker due
// now first for a task whose marker named a later time (or that had none),
// and a PUT of the record once the hook has run. Retry: GET, HEAD, then
// PUTs of the marker and the record, the wake object's PUT as Submit's,
// and a DELETE of the old marker of a task that was waiting for its retry.
// Schedule: GET, PUT of the new marker, PUT of the record, DELETE of the
// old marker, and the wake object's PUT as Submit's when the task is
// queued.
// Pause and Resume: a GET of the wake object and one of the paused
// object, then a PUT of each, or nothing more when the type already is (or
// is not) paused; Paused: 1 GET.
// List: 1 LIST plus one GET per task in the page, whatever the bucket holds;
// a filtered List also reads the tasks it passes over (see [Store.List]).
// RetryMany, CancelMany, PurgeMany: with a filter, the listing as a
// filtered List costs it, once per page (a page holds at most the tasks
// still to act on), then the single call's requests per task acted on
// (Retry's, Cancel's, and for PurgeMany a GET and what Purge spends on a
// task it deletes); a dry run costs the listing alone. By ID: one GET per
// task for a dry run, the single call's requests per task otherwise.
// PresignUpload, PresignUploadForm, PresignDownload: 1 GET (signing is
// local); CreateForUpload creates and presigns with 1 PUT. Workers: 1 LIST
// plus one GET per worker listed. One attempt: a LIST that finds it, a GET
// of the record, a PUT of the marker at the lease's end, the claim PUT, a
// DELETE of the queued marker, a GET of the input, a PUT of the output,
// one PUT per heartbeat (and one PUT and DELETE to move
// the marker once a lease, for an attempt longer than about 40 seconds at
// the defaults), the final PUT and a DELETE of the marker. A lost
// compare-and-set adds a GET.
//
// An idle worker makes one conditional GET of the wake object every 1.5 to
// 2 seconds (WorkerOptions.PollInterval, shortened at random) and one LIST of
// the markers per MaxPollInterval (60s by default): about 1.5 million GETs
// and 43,000 LISTs a month, $0.80 at S3 Standard prices, where a LIST every
// 2s would cost about six and a half dollars. Its hourly turn at the
// reconciler lease adds one GET; the one worker of the fleet that holds it
// pays for the reconcile itself, and one LIST a turn to sweep stale
// presence objects. Its presence object adds one PUT per PresenceInterval
// (21,900 a month at the default, $0.11) and a DELETE when it stops; a
// worker that lists only every few minutes (MaxPollInterval, as one fed S3
// events does) announces itself as rarely, and a negative PresenceInterval
// turns presence off at no request. Submit and Retry add their task's marker
// to the wake object, so new work is picked up within PollInterval plus a
// few round trips: an idle worker that notices visits the task named, with
// no LIST (one GET of its record, which finds it running if another worker
// came first); a Worker in the process that called Submit visits it at
// once (see [Worker.Wake] for waking
// workers from a signal of the host's own). Once the record has changed,
// the announcement goes out even if the call's context has ended: it has up
// to 2 seconds of its own, which the call may take past its deadline.
// BENCHMARKS.md has the measurements.
//
// # S3-compatible stores
//
// Conditional PUT is what makes this safe. The tests measure it on
// gofakes3, versitygw (1.8.0 and later) and SeaweedFS; AWS S3, Cloudflare
// R2, Ceph RGW, Tigris and recent MinIO document it; some stores silently
// ignore the headers and some refuse them. [Store.CheckBackend] proves the
// bucket enforces them, returns [ErrConditionalWritesUnsupported] where it
// does not, and reports what it measured ([BackendReport]): run it at
// start-up. docs/compatibility.md in the repository has the table.
package s3task
