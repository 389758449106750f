package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// FuzzAPI sends arbitrary paths, query strings and bodies to the control
// API. Whatever comes in, the service must answer with a JSON error or a JSON
// result and a 2xx or 4xx status, never panic or fail inside, and never
// write an object outside its task prefix.
func FuzzAPI(f *testing.F) {
	for _, seed := range []struct {
		post       bool
		path, body string
	}{
		{true, "/tasks", `{"name":"June","type":"csv_enrich","payload":{"required":["email"]}}`},
		{true, "/tasks", `{"name":"x","type":"csv_enrich","extra":1}`},
		{true, "/tasks", `{"name":` + strings.Repeat("[", 100)},
		{true, "/tasks", `{} {}`},
		{false, "/tasks?limit=-1", ""},
		{false, "/tasks?limit=2&cursor=%2F%2E%2E", ""},
		{false, "/tasks/../x", ""},
		{false, "/tasks/%2e%2e%2factive", ""},
		{true, "/tasks/7ZZZZZZZZZZZZZZZZZZZZZZZZZ/submit", ""},
		{true, "/tasks/7zzzzzzzzzzzzzzzzzzzzzzzzz/cancel", `{"reason":"r"}`},
		{true, "/tasks/active/retry", ""},
		{false, "/tasks/7ZZZZZZZZZZZZZZZZZZZZZZZZZ/output", ""},
	} {
		f.Add(seed.post, seed.path, seed.body)
	}
	svc := startService(f, svcOptions{mode: "api"})
	f.Fuzz(func(t *testing.T, post bool, path, body string) {
		u, err := url.Parse(path)
		if err != nil || (u.Path != "/tasks" && !strings.HasPrefix(u.Path, "/tasks/")) {
			return
		}
		method := http.MethodGet
		if post {
			method = http.MethodPost
		}
		req := httptest.NewRequest(method, "http://127.0.0.1/", strings.NewReader(body))
		req.URL, req.RequestURI = u, u.RequestURI()
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		svc.app.srv.Handler.ServeHTTP(rec, req)

		res := rec.Result()
		data, _ := io.ReadAll(res.Body)
		if res.StatusCode >= 500 {
			t.Fatalf("%s %q: status %d: %s", method, path, res.StatusCode, data)
		}
		if res.StatusCode >= 300 && res.StatusCode < 400 {
			return // the mux's clean-path redirects carry no JSON
		}
		if !json.Valid(data) {
			t.Fatalf("%s %q: status %d, body is not JSON: %q", method, path, res.StatusCode, data)
		}
		if res.StatusCode >= 400 {
			var e errorJSON
			if err := json.Unmarshal(data, &e); err != nil || e.Error.Code == "" {
				t.Fatalf("%s %q: status %d without an error code: %s", method, path, res.StatusCode, data)
			}
		}
		out, err := svc.app.objs.client.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(svc.app.objs.bucket)})
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range out.Contents {
			if key := aws.ToString(obj.Key); !strings.HasPrefix(key, svc.app.cfg.prefix) {
				t.Fatalf("%s %q wrote %q, outside the prefix %q", method, path, key, svc.app.cfg.prefix)
			}
		}
	})
}
