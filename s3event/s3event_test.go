package s3event_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3event"
)

// fakeNotifier records every event it is given and takes interest only in
// the keys in want.
type fakeNotifier struct {
	want map[string]bool

	mu  sync.Mutex
	got []s3task.ObjectEvent // without the version fields
	all []s3task.ObjectEvent // as given
}

func newFake(keys ...string) *fakeNotifier {
	f := &fakeNotifier{want: map[string]bool{}}
	for _, k := range keys {
		f.want[k] = true
	}
	return f
}

func (f *fakeNotifier) Notify(e s3task.ObjectEvent) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.all = append(f.all, e)
	// The version fields are checked in TestDeliverVersion; the others
	// compare the object and what happened to it.
	e.VersionID, e.ETag, e.Size, e.RawKey = "", "", 0, ""
	f.got = append(f.got, e)
	return f.want[e.Key]
}

func (f *fakeNotifier) events() []s3task.ObjectEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]s3task.ObjectEvent(nil), f.got...)
}

// awsBody is a notification as AWS S3 sends it (trimmed of the fields the
// package does not read).
const awsBody = `{
  "Records": [
    {
      "eventVersion": "2.1",
      "eventSource": "aws:s3",
      "awsRegion": "us-east-1",
      "eventTime": "2024-05-01T12:00:00.000Z",
      "eventName": "ObjectCreated:Put",
      "userIdentity": {"principalId": "AWS:EXAMPLE"},
      "s3": {
        "s3SchemaVersion": "1.0",
        "configurationId": "tasks",
        "bucket": {
          "name": "my-bucket",
          "ownerIdentity": {"principalId": "EXAMPLE"},
          "arn": "arn:aws:s3:::my-bucket"
        },
        "object": {
          "key": "tasks/queue/a+b%2Fc.json",
          "size": 1024,
          "eTag": "\"0123456789abcdef0123456789abcdef\"",
          "versionId": "096fKKXTRTtl3on89fVO.nfljtsv6qko",
          "sequencer": "0055AED6DCD90281E5"
        }
      }
    }
  ]
}`

var awsRecord = s3event.Record{
	Name:      "ObjectCreated:Put",
	Bucket:    "my-bucket",
	Key:       "tasks/queue/a+b%2Fc.json",
	ETag:      "0123456789abcdef0123456789abcdef",
	VersionID: "096fKKXTRTtl3on89fVO.nfljtsv6qko",
	Sequencer: "0055AED6DCD90281E5",
	Size:      1024,
}

// versityBody is a notification in versitygw's style: the "s3:" prefix on
// the event name, event version 2.2, the key as it is, no quotes on the
// ETag.
const versityBody = `{
  "Records": [
    {
      "eventVersion": "2.2",
      "eventSource": "aws:s3",
      "eventName": "s3:ObjectCreated:Put",
      "s3": {
        "bucket": {"name": "tasks"},
        "object": {
          "key": "s3task/m/01HX.json",
          "size": 7,
          "eTag": "abc123",
          "sequencer": "17C0A1B2C3D4E5F6"
        }
      }
    }
  ]
}`

var versityRecord = s3event.Record{
	Name:      "ObjectCreated:Put",
	Bucket:    "tasks",
	Key:       "s3task/m/01HX.json",
	ETag:      "abc123",
	Sequencer: "17C0A1B2C3D4E5F6",
	Size:      7,
}

// testEventBody is the event S3 sends when notifications are configured.
const testEventBody = `{
  "Service": "Amazon S3",
  "Event": "s3:TestEvent",
  "Time": "2024-05-01T12:00:00.000Z",
  "Bucket": "my-bucket",
  "RequestId": "5582815E1AEA5ADF",
  "HostId": "8cLeGAmw098X5cv4Zkwcmo8vvZa3eH3eKxsPzbB9wrR+YstdA6Knx4Ip8EXAMPLE"
}`

// record returns the JSON of one record.
func record(name, bucket, key string) string {
	b, err := json.Marshal(map[string]any{
		"eventName": name,
		"s3": map[string]any{
			"bucket": map[string]any{"name": bucket},
			"object": map[string]any{"key": key, "size": 1},
		},
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// records returns a notification of the given records' JSON.
func records(rs ...string) string {
	return `{"Records":[` + strings.Join(rs, ",") + `]}`
}

// sns wraps a notification in an SNS message.
func sns(body string) string {
	b, err := json.Marshal(map[string]any{
		"Type":      "Notification",
		"MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
		"TopicArn":  "arn:aws:sns:us-east-1:123456789012:tasks",
		"Subject":   "Amazon S3 Notification",
		"Message":   body,
		"Timestamp": "2024-05-01T12:00:00.000Z",
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []s3event.Record
	}{
		{"aws", awsBody, []s3event.Record{awsRecord}},
		{"versitygw", versityBody, []s3event.Record{versityRecord}},
		{
			"several records",
			records(
				record("ObjectCreated:Put", "b", "k1"),
				record("s3:ObjectRemoved:Delete", "b", "k2"),
				record("ObjectCreated:CompleteMultipartUpload", "c", "k 3"),
			),
			[]s3event.Record{
				{Name: "ObjectCreated:Put", Bucket: "b", Key: "k1", Size: 1},
				{Name: "ObjectRemoved:Delete", Bucket: "b", Key: "k2", Size: 1},
				{Name: "ObjectCreated:CompleteMultipartUpload", Bucket: "c", Key: "k 3", Size: 1},
			},
		},
		{"sns", sns(awsBody), []s3event.Record{awsRecord}},
		{"sns versitygw", sns(versityBody), []s3event.Record{versityRecord}},
		{"test event", testEventBody, nil},
		{"sns test event", sns(testEventBody), nil},
		{"no records", `{"Records":[]}`, []s3event.Record{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s3event.Parse([]byte(tt.body))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse records (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseETagQuotes(t *testing.T) {
	body := `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k","eTag":"\"e-1\""}}}]}`
	got, err := s3event.Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ETag != "e-1" {
		t.Errorf("Parse = %+v, want one record with ETag e-1", got)
	}
}

func TestParseNotEvent(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"invalid JSON", `{"Records":[`},
		{"not JSON", `hello`},
		{"empty", ``},
		{"empty object", `{}`},
		{"array", `[]`},
		{"null", `null`},
		{"null records", `{"Records":null}`},
		{"records not an array", `{"Records":{}}`},
		{"no key", records(record("ObjectCreated:Put", "b", ""))},
		{"no bucket", records(record("ObjectCreated:Put", "", "k"))},
		{"no event name", records(record("", "b", "k"))},
		{"second record bad", records(record("ObjectCreated:Put", "b", "k"), record("ObjectCreated:Put", "b", ""))},
		{"other event", `{"Service":"Amazon S3","Event":"s3:SomethingElse"}`},
		{"sns twice", sns(sns(awsBody))},
		{"sns empty message", `{"Type":"Notification","Message":""}`},
		{"sns message not JSON", `{"Type":"Notification","Message":"hello"}`},
		{"sns message not a string", `{"Type":"Notification","Message":{"Records":[]}}`},
		{"sns subscription confirmation", `{"Type":"SubscriptionConfirmation","Message":"You have chosen to subscribe"}`},
		{"size not a number", `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k","size":"1"}}}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s3event.Parse([]byte(tt.body))
			if !errors.Is(err, s3event.ErrNotEvent) {
				t.Errorf("Parse error = %v, want ErrNotEvent", err)
			}
			if got != nil {
				t.Errorf("Parse records = %+v, want nil", got)
			}
		})
	}
}

func TestRecordCreatedRemoved(t *testing.T) {
	tests := []struct {
		name             string
		created, removed bool
	}{
		{"ObjectCreated:Put", true, false},
		{"ObjectCreated:Post", true, false},
		{"ObjectCreated:Copy", true, false},
		{"ObjectCreated:CompleteMultipartUpload", true, false},
		{"ObjectRemoved:Delete", false, true},
		{"ObjectRemoved:DeleteMarkerCreated", false, true},
		{"ObjectRestore:Completed", false, false},
		{"TestEvent", false, false},
		{"LifecycleExpiration:Delete", false, true},
		{"", false, false},
		// Parse strips the prefix; a Record built by hand keeps it.
		{"s3:ObjectCreated:Put", false, false},
	}
	for _, tt := range tests {
		r := s3event.Record{Name: tt.name}
		if got := r.Created(); got != tt.created {
			t.Errorf("Record{Name: %q}.Created() = %v, want %v", tt.name, got, tt.created)
		}
		if got := r.Removed(); got != tt.removed {
			t.Errorf("Record{Name: %q}.Removed() = %v, want %v", tt.name, got, tt.removed)
		}
	}
}

func TestDecodeKey(t *testing.T) {
	tests := []struct {
		key  string
		want string
		ok   bool
	}{
		{"a+b%2Fc", "a b/c", true},
		{"tasks/queue/01HX.json", "tasks/queue/01HX.json", true},
		{"", "", true},
		{"a%2Bb", "a+b", true},
		{"%E2%82%AC", "€", true},
		{"%zz", "", false},
		{"a%2", "", false},
	}
	for _, tt := range tests {
		got, ok := s3event.DecodeKey(tt.key)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("DecodeKey(%q) = %q, %v; want %q, %v", tt.key, got, ok, tt.want, tt.ok)
		}
	}
}

func TestDeliverCreatedRemoved(t *testing.T) {
	n := newFake("k1", "k2", "k3")
	rs := []s3event.Record{
		{Name: "ObjectCreated:Put", Bucket: "b", Key: "k1"},
		{Name: "ObjectRemoved:Delete", Bucket: "b", Key: "k2"},
		{Name: "ObjectRemoved:DeleteMarkerCreated", Bucket: "c", Key: "k3"},
	}
	if got := s3event.Deliver(n, rs); got != 3 {
		t.Errorf("Deliver = %d, want 3", got)
	}
	want := []s3task.ObjectEvent{
		{Bucket: "b", Key: "k1"},
		{Bucket: "b", Key: "k2", Removed: true},
		{Bucket: "c", Key: "k3", Removed: true},
	}
	if diff := cmp.Diff(want, n.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestDeliverSkipsOtherEvents(t *testing.T) {
	n := newFake("k")
	rs := []s3event.Record{
		{Name: "ObjectRestore:Completed", Bucket: "b", Key: "k"},
		{Name: "TestEvent", Bucket: "b", Key: "k"},
		{Name: "ObjectTagging:Put", Bucket: "b", Key: "k"},
		{Name: "s3:ObjectCreated:Put", Bucket: "b", Key: "k"},
	}
	if got := s3event.Deliver(n, rs); got != 0 {
		t.Errorf("Deliver = %d, want 0", got)
	}
	if got := n.events(); len(got) != 0 {
		t.Errorf("events = %+v, want none", got)
	}
}

func TestDeliverNoRecords(t *testing.T) {
	n := newFake()
	if got := s3event.Deliver(n, nil); got != 0 {
		t.Errorf("Deliver(nil) = %d, want 0", got)
	}
	if got := n.events(); len(got) != 0 {
		t.Errorf("events = %+v, want none", got)
	}
}

func TestDeliverKeys(t *testing.T) {
	const sent = "q/a+b%2Fc"
	tests := []struct {
		name string
		key  string
		want []string // keys wanted by the notifier
		// what the notifier is given, in order, and the count
		got   []string
		count int
	}{
		{"decoded taken", sent, []string{"q/a b/c"}, []string{"q/a b/c"}, 1},
		{"raw taken", sent, []string{sent}, []string{"q/a b/c", sent}, 1},
		{"neither taken", sent, nil, []string{"q/a b/c", sent}, 0},
		{"plain key", "q/01HX", []string{"q/01HX"}, []string{"q/01HX"}, 1},
		{"plain key not taken", "q/01HX", nil, []string{"q/01HX"}, 0},
		{"invalid escape", "q/%zz", []string{"q/%zz"}, []string{"q/%zz"}, 1},
		{"invalid escape not taken", "q/%zz", nil, []string{"q/%zz"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newFake(tt.want...)
			rs := []s3event.Record{{Name: "ObjectCreated:Put", Bucket: "b", Key: tt.key}}
			if got := s3event.Deliver(n, rs); got != tt.count {
				t.Errorf("Deliver = %d, want %d", got, tt.count)
			}
			var want []s3task.ObjectEvent
			for _, k := range tt.got {
				want = append(want, s3task.ObjectEvent{Bucket: "b", Key: k})
			}
			if diff := cmp.Diff(want, n.events()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeliverRemovedRawKey(t *testing.T) {
	// The raw retry keeps Removed.
	n := newFake("a+b")
	rs := []s3event.Record{{Name: "ObjectRemoved:Delete", Bucket: "b", Key: "a+b"}}
	if got := s3event.Deliver(n, rs); got != 1 {
		t.Errorf("Deliver = %d, want 1", got)
	}
	want := []s3task.ObjectEvent{
		{Bucket: "b", Key: "a b", Removed: true},
		{Bucket: "b", Key: "a+b", Removed: true},
	}
	if diff := cmp.Diff(want, n.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestDeliverCount(t *testing.T) {
	n := newFake("mine/1", "mine/2 x", "mine/4")
	rs := []s3event.Record{
		{Name: "ObjectCreated:Put", Bucket: "b", Key: "mine/1"},
		{Name: "ObjectCreated:Put", Bucket: "b", Key: "mine/2+x"}, // taken decoded
		{Name: "ObjectCreated:Put", Bucket: "b", Key: "other/3"},  // not taken
		{Name: "ObjectRemoved:Delete", Bucket: "b", Key: "mine/4"},
		{Name: "ObjectRestore:Completed", Bucket: "b", Key: "mine/1"}, // skipped
		{Name: "ObjectCreated:Copy", Bucket: "b", Key: "mine/1"},      // a duplicate counts again
	}
	if got := s3event.Deliver(n, rs); got != 4 {
		t.Errorf("Deliver = %d, want 4", got)
	}
	if got := len(n.events()); got != 5 {
		t.Errorf("Notify called %d times, want 5", got)
	}
}

func TestParseThenDeliver(t *testing.T) {
	rs, err := s3event.Parse([]byte(sns(awsBody)))
	if err != nil {
		t.Fatal(err)
	}
	n := newFake("tasks/queue/a b/c.json")
	if got := s3event.Deliver(n, rs); got != 1 {
		t.Errorf("Deliver = %d, want 1", got)
	}
	want := []s3task.ObjectEvent{{Bucket: "my-bucket", Key: "tasks/queue/a b/c.json"}}
	if diff := cmp.Diff(want, n.events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestNewHandlerErrors(t *testing.T) {
	tests := []struct {
		name string
		n    s3event.Notifier
		opts *s3event.HandlerOptions
	}{
		{"nil notifier", nil, &s3event.HandlerOptions{Token: "T"}},
		{"nil options", newFake(), nil},
		{"no token", newFake(), &s3event.HandlerOptions{}},
		{"negative MaxBody", newFake(), &s3event.HandlerOptions{Token: "T", MaxBody: -1}},
		{"negative MaxBody unauthenticated", newFake(), &s3event.HandlerOptions{Unauthenticated: true, MaxBody: -1}},
		{"negative MaxRecords", newFake(), &s3event.HandlerOptions{Token: "T", MaxRecords: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := s3event.NewHandler(tt.n, tt.opts)
			if err == nil {
				t.Errorf("NewHandler = %v, nil; want an error", h)
			}
			if h != nil {
				t.Errorf("NewHandler returned a handler with an error")
			}
		})
	}
}

func TestNewHandlerOK(t *testing.T) {
	for _, opts := range []*s3event.HandlerOptions{
		{Token: "T"},
		{Token: "T", MaxBody: 1},
		{Token: "T", MaxRecords: 1},
		{Unauthenticated: true},
		{Token: "T", Unauthenticated: true},
	} {
		if _, err := s3event.NewHandler(newFake(), opts); err != nil {
			t.Errorf("NewHandler(%+v): %v", opts, err)
		}
	}
}

// wanted is the key of versityBody, so that every accepted delivery of it
// concerns the fake notifier.
const wanted = "s3task/m/01HX.json"

// serve sends one request to h and returns the response.
func serve(h http.Handler, method, target, auth, body string) *http.Response {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, r)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Result()
}

func newHandler(t *testing.T, opts *s3event.HandlerOptions) (http.Handler, *fakeNotifier) {
	t.Helper()
	n := newFake(wanted)
	h, err := s3event.NewHandler(n, opts)
	if err != nil {
		t.Fatal(err)
	}
	return h, n
}

func TestHandlerMethod(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete} {
		h, n := newHandler(t, &s3event.HandlerOptions{Token: "T"})
		resp := serve(h, method, "/?token=T", "Bearer T", versityBody)
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s: status %d, want 405", method, resp.StatusCode)
		}
		if got := resp.Header.Get("Allow"); got != http.MethodPost {
			t.Errorf("%s: Allow %q, want POST", method, got)
		}
		if got := n.events(); len(got) != 0 {
			t.Errorf("%s: events %+v, want none", method, got)
		}
	}
}

func TestHandlerToken(t *testing.T) {
	const token = "s3cret-token"
	tests := []struct {
		name   string
		target string
		auth   string
		status int
	}{
		{"no token", "/", "", http.StatusUnauthorized},
		{"wrong token", "/", "Bearer nope", http.StatusUnauthorized},
		{"same length wrong bytes", "/", "Bearer s3cret-tokeN", http.StatusUnauthorized},
		{"prefix of token", "/", "Bearer s3cret", http.StatusUnauthorized},
		{"token and more", "/", "Bearer " + token + "x", http.StatusUnauthorized},
		{"empty bearer", "/", "Bearer ", http.StatusUnauthorized},
		{"no scheme", "/", token, http.StatusUnauthorized},
		{"basic scheme", "/", "Basic " + token, http.StatusUnauthorized},
		{"wrong query token", "/?token=nope", "", http.StatusUnauthorized},
		{"same length query", "/?token=s3cret-tokeN", "", http.StatusUnauthorized},
		{"empty query token", "/?token=", "", http.StatusUnauthorized},
		{"other query parameter", "/?secret=" + token, "", http.StatusUnauthorized},
		// The header, when it carries a bearer token, decides.
		{"wrong header right query", "/?token=" + token, "Bearer nope", http.StatusUnauthorized},
		{"bearer header", "/", "Bearer " + token, http.StatusNoContent},
		{"scheme in lower case", "/", "bearer " + token, http.StatusNoContent},
		{"query token", "/?token=" + token, "", http.StatusNoContent},
		{"query token among others", "/hook?a=1&token=" + token + "&b=2", "", http.StatusNoContent},
		{"right header wrong query", "/?token=nope", "Bearer " + token, http.StatusNoContent},
		{"basic header right query", "/?token=" + token, "Basic xyz", http.StatusNoContent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, n := newHandler(t, &s3event.HandlerOptions{Token: token})
			resp := serve(h, http.MethodPost, tt.target, tt.auth, versityBody)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			var want []s3task.ObjectEvent
			if tt.status == http.StatusNoContent {
				want = []s3task.ObjectEvent{{Bucket: "tasks", Key: wanted}}
			}
			if diff := cmp.Diff(want, n.events()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHandlerMaxBody(t *testing.T) {
	// A notification of exactly limit bytes, padded with spaces.
	const limit = 100
	small := `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}]}`
	if len(small) > limit {
		t.Fatalf("test body is %d bytes, over %d", len(small), limit)
	}
	exact := small + strings.Repeat(" ", limit-len(small))

	h, n := newHandler(t, &s3event.HandlerOptions{Token: "T", MaxBody: limit})
	if resp := serve(h, http.MethodPost, "/", "Bearer T", exact+" "); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("body of %d bytes: status %d, want 413", limit+1, resp.StatusCode)
	}
	if resp := serve(h, http.MethodPost, "/", "Bearer T", versityBody+strings.Repeat(" ", 10000)); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("large body: status %d, want 413", resp.StatusCode)
	}
	if got := n.events(); len(got) != 0 {
		t.Fatalf("events %+v after refused bodies, want none", got)
	}
	if resp := serve(h, http.MethodPost, "/", "Bearer T", exact); resp.StatusCode != http.StatusNoContent {
		t.Errorf("body of %d bytes: status %d, want 204", limit, resp.StatusCode)
	}
	if got := len(n.events()); got != 1 {
		t.Errorf("%d events after a body at the limit, want 1", got)
	}
}

func TestHandlerDefaultMaxBody(t *testing.T) {
	h, n := newHandler(t, &s3event.HandlerOptions{Token: "T"})
	big := versityBody + strings.Repeat(" ", s3event.DefaultMaxBody)
	if resp := serve(h, http.MethodPost, "/", "Bearer T", big); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d, want 413", resp.StatusCode)
	}
	if got := n.events(); len(got) != 0 {
		t.Errorf("events %+v, want none", got)
	}
}

func TestHandlerBody(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		status int
		events int
	}{
		{"not an event", `{"hello":"world"}`, http.StatusBadRequest, 0},
		{"not JSON", `hello`, http.StatusBadRequest, 0},
		{"empty", ``, http.StatusBadRequest, 0},
		{"record without key", records(record("ObjectCreated:Put", "b", "")), http.StatusBadRequest, 0},
		{"test event", testEventBody, http.StatusNoContent, 0},
		{"sns test event", sns(testEventBody), http.StatusNoContent, 0},
		{"event", versityBody, http.StatusNoContent, 1},
		{"sns event", sns(versityBody), http.StatusNoContent, 1},
		// Events of other objects are read and answered the same.
		{"foreign event", awsBody, http.StatusNoContent, 2},
		{"restore event", records(record("ObjectRestore:Completed", "b", wanted)), http.StatusNoContent, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, n := newHandler(t, &s3event.HandlerOptions{Token: "T"})
			resp := serve(h, http.MethodPost, "/", "Bearer T", tt.body)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if got := len(n.events()); got != tt.events {
				t.Errorf("%d events, want %d: %+v", got, tt.events, n.events())
			}
			if tt.status == http.StatusNoContent {
				if b, _ := io.ReadAll(resp.Body); len(b) != 0 {
					t.Errorf("204 with body %q", b)
				}
			}
		})
	}
}

func TestHandlerReadError(t *testing.T) {
	h, n := newHandler(t, &s3event.HandlerOptions{Token: "T"})
	req := httptest.NewRequest(http.MethodPost, "/", iotest.ErrReader(errors.New("connection reset")))
	req.Header.Set("Authorization", "Bearer T")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusBadRequest {
		t.Errorf("status %d, want 400", w.Code)
	}
	if got := n.events(); len(got) != 0 {
		t.Errorf("events %+v, want none", got)
	}
}

func TestHandlerUnauthenticated(t *testing.T) {
	for _, auth := range []string{"", "Bearer anything"} {
		h, n := newHandler(t, &s3event.HandlerOptions{Unauthenticated: true})
		if resp := serve(h, http.MethodPost, "/", auth, versityBody); resp.StatusCode != http.StatusNoContent {
			t.Errorf("auth %q: status %d, want 204", auth, resp.StatusCode)
		}
		want := []s3task.ObjectEvent{{Bucket: "tasks", Key: wanted}}
		if diff := cmp.Diff(want, n.events()); diff != "" {
			t.Errorf("auth %q: events (-want +got):\n%s", auth, diff)
		}
	}
	// Without a token, the other checks still apply.
	h, n := newHandler(t, &s3event.HandlerOptions{Unauthenticated: true, MaxBody: 100})
	if resp := serve(h, http.MethodGet, "/", "", ""); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d, want 405", resp.StatusCode)
	}
	if resp := serve(h, http.MethodPost, "/", "", `{}`); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("non-event: status %d, want 400", resp.StatusCode)
	}
	if resp := serve(h, http.MethodPost, "/", "", versityBody); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("large body: status %d, want 413", resp.StatusCode)
	}
	if got := n.events(); len(got) != 0 {
		t.Errorf("events %+v, want none", got)
	}
}

// A token given with Unauthenticated is still required.
func TestHandlerTokenAndUnauthenticated(t *testing.T) {
	h, n := newHandler(t, &s3event.HandlerOptions{Token: "T", Unauthenticated: true})
	if resp := serve(h, http.MethodPost, "/", "Bearer nope", versityBody); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong token: status %d, want 401", resp.StatusCode)
	}
	if resp := serve(h, http.MethodPost, "/", "", versityBody); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: status %d, want 401", resp.StatusCode)
	}
	if got := n.events(); len(got) != 0 {
		t.Errorf("events %+v, want none", got)
	}
	if resp := serve(h, http.MethodPost, "/", "Bearer T", versityBody); resp.StatusCode != http.StatusNoContent {
		t.Errorf("right token: status %d, want 204", resp.StatusCode)
	}
}

func TestHandlerConcurrent(t *testing.T) {
	h, n := newHandler(t, &s3event.HandlerOptions{Token: "T"})
	srv := httptest.NewServer(h)
	defer srv.Close()

	const requests = 20
	var wg sync.WaitGroup
	errs := make(chan error, requests)
	for range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/?token=T", strings.NewReader(versityBody))
			if err != nil {
				errs <- err
				return
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				errs <- errors.New(resp.Status)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := len(n.events()); got != requests {
		t.Errorf("%d events, want %d", got, requests)
	}
}

// TestDeliverVersion: the event's version ID, ETag and size reach the
// notifier, and a key that decodes to another comes with the key as sent.
func TestDeliverVersion(t *testing.T) {
	body := `{"Records":[
		{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"in/a+b.csv","size":42,"eTag":"\"e1\"","versionId":"v1"}}},
		{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"in/plain.csv","eTag":"e2"}}}
	]}`
	records, err := s3event.Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	f := newFake("in/a b.csv", "in/plain.csv")
	if n := s3event.Deliver(f, records); n != 2 {
		t.Fatalf("Deliver took %d, want 2", n)
	}
	want := []s3task.ObjectEvent{
		{Bucket: "b", Key: "in/a b.csv", RawKey: "in/a+b.csv", VersionID: "v1", ETag: "e1", Size: 42},
		{Bucket: "b", Key: "in/plain.csv", ETag: "e2", Size: -1},
	}
	if diff := cmp.Diff(want, f.all); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// endless is a request body of size bytes of a notification's padding
// that counts what is read of it.
type endless struct {
	size int64
	read atomic.Int64
}

func (e *endless) Read(p []byte) (int, error) {
	left := e.size - e.read.Load()
	if left <= 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), left)
	for i := range p[:n] {
		p[i] = ' '
	}
	e.read.Add(n)
	return int(n), nil
}

// TestHandlerRefusesUnreadBody: a delivery without the token, or with a
// wrong one, or by another method, is refused before a byte of its body is
// read, however large the body; with the token the same body is read, up
// to MaxBody and one byte more.
func TestHandlerRefusesUnreadBody(t *testing.T) {
	const size = 1 << 30 // a GiB: never generated unless read
	for _, tt := range []struct {
		name, method, target, auth string
		status                     int
		read                       int64
	}{
		{"no token", http.MethodPost, "/", "", http.StatusUnauthorized, 0},
		{"wrong bearer token", http.MethodPost, "/", "Bearer s3cret-tokeN", http.StatusUnauthorized, 0},
		{"wrong query token", http.MethodPost, "/?token=nope", "", http.StatusUnauthorized, 0},
		{"PUT with the token", http.MethodPut, "/", "Bearer s3cret-token", http.StatusMethodNotAllowed, 0},
		{"the token", http.MethodPost, "/", "Bearer s3cret-token", http.StatusRequestEntityTooLarge, s3event.DefaultMaxBody + 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, n := newHandler(t, &s3event.HandlerOptions{Token: "s3cret-token"})
			body := &endless{size: size}
			req := httptest.NewRequest(tt.method, tt.target, body)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tt.status {
				t.Errorf("status %d, want %d", w.Code, tt.status)
			}
			// The recorder's MaxBytesReader may read ahead by a buffer's
			// worth, never a whole body: the read is bounded by the limit.
			if got := body.read.Load(); tt.read == 0 && got != 0 || tt.read > 0 && (got < tt.read || got > tt.read+64<<10) {
				t.Errorf("%d bytes of the body read, want %d", got, tt.read)
			}
			if got := n.events(); len(got) != 0 {
				t.Errorf("events %+v, want none", got)
			}
		})
	}
}

// TestHandlerMaxRecords: a delivery of more records than MaxRecords (10
// by default) is refused whole with 413, and none of its events reaches
// the notifier: a flood of 3,000 records for objects that do not exist
// costs nothing. One of MaxRecords records is delivered.
func TestHandlerMaxRecords(t *testing.T) {
	many := func(n int) string {
		rs := make([]string, n)
		for i := range rs {
			rs[i] = record("ObjectCreated:Put", "tasks", fmt.Sprintf("incoming/missing-%d.csv", i))
		}
		return records(rs...)
	}
	for _, tt := range []struct {
		name       string
		maxRecords int
		records    int
		status     int
	}{
		{"the default, one record", 0, 1, http.StatusNoContent},
		{"the default's number", 0, s3event.DefaultMaxRecords, http.StatusNoContent},
		{"one over the default", 0, s3event.DefaultMaxRecords + 1, http.StatusRequestEntityTooLarge},
		{"a flood in one delivery", 0, 3000, http.StatusRequestEntityTooLarge},
		{"a test event, no records", 1, 0, http.StatusNoContent},
		{"MaxRecords 1, one record", 1, 1, http.StatusNoContent},
		{"MaxRecords 1, two records", 1, 2, http.StatusRequestEntityTooLarge},
		{"MaxRecords 5000, the flood", 5000, 3000, http.StatusNoContent},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, n := newHandler(t, &s3event.HandlerOptions{Token: "T", MaxRecords: tt.maxRecords})
			body := many(tt.records)
			if tt.records == 0 {
				body = testEventBody
			}
			resp := serve(h, http.MethodPost, "/", "Bearer T", body)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			want := 0
			if tt.status == http.StatusNoContent {
				want = tt.records
			}
			if got := len(n.events()); got != want {
				t.Errorf("%d events reached the notifier, want %d", got, want)
			}
		})
	}
}
