package conformance

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/s3task/s3task/internal/s3x"
)

// statusOf describes a request's answer as "<HTTP status> <error code>",
// or "200" when it succeeded.
func statusOf(err error) string {
	if err == nil {
		return "200"
	}
	var re *awshttp.ResponseError
	var ae smithy.APIError
	switch {
	case errors.As(err, &re) && errors.As(err, &ae):
		return fmt.Sprintf("%d %s", re.HTTPStatusCode(), ae.ErrorCode())
	case errors.As(err, &re):
		return fmt.Sprint(re.HTTPStatusCode())
	}
	return err.Error()
}

// testBehaviours measures, one request each, the answers the library's
// compatibility table (docs/compatibility.md) lists per server, logs them
// as "behaviour <name>: <answer>" lines, and checks that the table's
// column for the server says the same. What the library depends on is
// asserted; the rest, such as conditional DELETE, which it does not use,
// is only recorded.
func testBehaviours(t *testing.T, b Backend) {
	h := open(t, b, nil)
	c, bucket := h.raw.Client, h.tg.Bucket
	measured := map[string]string{}
	record := func(name, answer string) {
		t.Logf("behaviour %s: %s", name, answer)
		measured[name] = answer
	}
	defer func() { compareTable(t, h.tg.Backend, measured) }()
	zero := aws.String(`"0123456789abcdef0123456789abcdef"`)

	key := "behaviours/object"
	etag, err := putBody(h.ctx, c, bucket, key, "v1", aws.String("*"), nil)
	if err != nil {
		t.Fatalf("PUT If-None-Match: * of a new key: %v", err)
	}
	record("put-if-none-match-new", statusOf(nil))

	_, err = putBody(h.ctx, c, bucket, key, "v2", aws.String("*"), nil)
	wantLost(t, err, "PUT If-None-Match: * of an existing key")
	record("put-if-none-match-existing", statusOf(err))

	_, err = putBody(h.ctx, c, bucket, key, "v2", nil, zero)
	wantLost(t, err, "PUT If-Match another ETag")
	record("put-if-match-wrong", statusOf(err))

	_, err = putBody(h.ctx, c, bucket, "behaviours/missing", "v2", nil, zero)
	wantLost(t, err, "PUT If-Match on a missing key")
	record("put-if-match-missing", statusOf(err))

	// The ETag a PUT returns is the one the next If-Match must name.
	head, err := c.HeadObject(h.ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(head.ETag); got != etag {
		t.Errorf("PUT returned ETag %s, HEAD %s: an If-Match with the PUT's would fail", etag, got)
	}
	record("put-etag-equals-head-etag", fmt.Sprint(aws.ToString(head.ETag) == etag))
	_, err = putBody(h.ctx, c, bucket, key, "v2", nil, aws.String(etag))
	if err != nil {
		t.Errorf("PUT If-Match the current ETag: %v", err)
	}
	record("put-if-match-current", statusOf(err))

	get := func(ifMatch, ifNoneMatch *string) (string, error) {
		out, err := c.GetObject(h.ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key, IfMatch: ifMatch, IfNoneMatch: ifNoneMatch}, noRetry)
		if err != nil {
			return "", err
		}
		out.Body.Close()
		when, ok := awsmiddleware.GetServerTime(out.ResultMetadata)
		if !ok || when.IsZero() {
			t.Errorf("GET answered without a Date header")
		}
		return aws.ToString(out.ETag), nil
	}
	cur, err := get(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	record("date-header", "present")
	switch _, err := get(zero, nil); {
	case err == nil:
		record("get-if-match-wrong", "ignored (200)")
	case s3x.Lost(err):
		record("get-if-match-wrong", statusOf(err))
	default:
		t.Errorf("GET If-Match another ETag: %v", err)
	}
	_, err = get(nil, aws.String(cur))
	if !s3x.NotModified(err) {
		t.Errorf("GET If-None-Match the current ETag = %v, want 304", err)
	}
	record("get-if-none-match-current", statusOf(err))

	// Conditional DELETE: the library never relies on it (see DESIGN 7).
	_, err = c.DeleteObject(h.ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key, IfMatch: zero}, noRetry)
	_, kept := h.object(key)
	switch {
	case err == nil && !kept:
		record("delete-if-match-wrong", "ignored: deleted")
	case err == nil:
		record("delete-if-match-wrong", "answered 204 but kept the object")
	default:
		record("delete-if-match-wrong", statusOf(err))
	}

	// Empty objects: the active markers are empty.
	if _, err := c.PutObject(h.ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("behaviours/empty"), Body: http.NoBody, ContentLength: aws.Int64(0)}); err != nil {
		t.Errorf("PUT of an empty object: %v", err)
	}
	if body, ok := h.object("behaviours/empty"); !ok || len(body) != 0 {
		t.Errorf("the empty object reads back as %q (stored %v)", body, ok)
	}
	record("empty-object", "stored")
}

// tableRows names the row of docs/compatibility.md that shows each
// behaviour, by the start of its first cell.
var tableRows = map[string]string{
	"put-if-none-match-existing": "PUT `If-None-Match: *` on an existing key",
	"put-if-match-wrong":         "PUT `If-Match` with a wrong ETag",
	"put-if-match-missing":       "PUT `If-Match` on a missing key",
	"get-if-none-match-current":  "GET `If-None-Match` with the current ETag",
	"get-if-match-wrong":         "GET `If-Match` with another ETag",
	"delete-if-match-wrong":      "DELETE `If-Match` with a wrong ETag",
}

// compareTable checks that the compatibility table's column for backend
// shows what was measured. A backend without a column of its own (a
// server named in S3TASK_TEST_ENDPOINT by hand, say) is not compared.
func compareTable(t *testing.T, backend string, measured map[string]string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("docs", "compatibility.md"))
	if err != nil {
		t.Errorf("the compatibility table: %v", err)
		return
	}
	var header []string
	rows := map[string][]string{}
	for line := range strings.SplitSeq(string(data), "\n") {
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if header == nil && cells[0] == "Behaviour" {
			header = cells
			continue
		}
		for name, label := range tableRows {
			if strings.HasPrefix(cells[0], label) {
				rows[name] = cells
			}
		}
	}
	col := -1
	for i, h := range header {
		if strings.HasPrefix(strings.ToLower(h), strings.ToLower(backend)+" ") && strings.Contains(h, "(measured)") {
			col = i
		}
	}
	if col < 0 {
		t.Logf("docs/compatibility.md has no measured column for %s", backend)
		return
	}
	for name, label := range tableRows {
		got, ok := measured[name]
		if !ok {
			continue
		}
		row := rows[name]
		if len(row) <= col {
			t.Errorf("docs/compatibility.md has no row %q with a %s cell", label, header[col])
			continue
		}
		if row[col] != got {
			t.Errorf("docs/compatibility.md, %q, %s: %q; measured %q", label, header[col], row[col], got)
		}
	}
}
