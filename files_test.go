package s3task_test

import (
	"context"
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3tasktest"
)

// imageFiles is a Store that keeps CSV tasks (the Store's own options) and
// thumbnail tasks (an entry in Files) side by side.
var imageFiles = s3task.StoreOptions{
	InputExt: ".csv", OutputExt: ".csv", InputContentType: "text/csv",
	Files: map[string]s3task.FileOptions{
		"thumbnail": {InputExt: ".png", OutputExt: ".webp", InputContentType: "image/png"},
	},
}

// Each task type's files take its entry in StoreOptions.Files: the input's
// name and pinned Content-Type in both presigned uploads and UploadInput,
// the output's name in Job.OutputKey, the record and the download.
func TestFilesPerType(t *testing.T) {
	t.Parallel()
	st, e := setup(t, &imageFiles)

	thumb, err := st.Create(e.ctx, s3task.CreateParams{Name: "avatar", Type: "thumbnail"})
	if err != nil {
		t.Fatal(err)
	}
	sheet, err := st.Create(e.ctx, s3task.CreateParams{Name: "sheet", Type: "import"})
	if err != nil {
		t.Fatal(err)
	}
	dir := func(id string) string { return st.Prefix() + id + "/" }
	if want := dir(thumb.ID) + "input.png"; thumb.InputPath != want {
		t.Errorf("thumbnail's InputPath %s, want %s", thumb.InputPath, want)
	}
	if want := dir(sheet.ID) + "input.csv"; sheet.InputPath != want {
		t.Errorf("import's InputPath %s, want the Store's %s", sheet.InputPath, want)
	}

	put, err := st.PresignUpload(e.ctx, thumb.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := url.Parse(put.URL); !strings.HasSuffix(u.Path, "/input.png") || put.Header.Get("Content-Type") != "image/png" {
		t.Errorf("presigned PUT of the thumbnail: path %s, Content-Type %q; want input.png, image/png", u.Path, put.Header.Get("Content-Type"))
	}
	form, err := st.PresignUploadForm(e.ctx, thumb.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(form.Fields["key"], "/upload.png") || form.Fields["Content-Type"] != "image/png" {
		t.Errorf("presigned form of the thumbnail: key %s, Content-Type %q; want upload.png, image/png", form.Fields["key"], form.Fields["Content-Type"])
	}
	sheetPut, err := st.PresignUpload(e.ctx, sheet.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if sheetPut.Header.Get("Content-Type") != "text/csv" {
		t.Errorf("presigned PUT of the import: Content-Type %q, want the Store's text/csv", sheetPut.Header.Get("Content-Type"))
	}

	// A presigned PUT with the pinned type lands; UploadInput stores it.
	e.sendPresigned(t, put, []byte("\x89PNG fake"))
	if err := st.UploadInput(e.ctx, sheet.ID, strings.NewReader("a,b\n1,2\n")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, ct string }{{thumb.InputPath, "image/png"}, {sheet.InputPath, "text/csv"}} {
		out, err := e.srv.Client().HeadObject(e.ctx, &s3.HeadObjectInput{Bucket: aws.String(e.srv.Bucket()), Key: &c.key})
		if err != nil {
			t.Fatalf("HEAD %s: %v", c.key, err)
		}
		if got := aws.ToString(out.ContentType); got != c.ct {
			t.Errorf("%s stored as %q, want %q", c.key, got, c.ct)
		}
	}
	for _, id := range []string{thumb.ID, sheet.ID} {
		if _, err := st.Submit(e.ctx, id); err != nil {
			t.Fatalf("Submit(%s): %v", id, err)
		}
	}

	var mux s3task.Mux
	outputs := map[string]string{}
	for _, typ := range []string{"thumbnail", "import"} {
		if err := mux.HandleFunc(typ, func(ctx context.Context, job *s3task.Job) error {
			in, err := job.OpenInput(ctx)
			if err != nil {
				return err
			}
			body, err := io.ReadAll(in)
			in.Close()
			if err != nil {
				return err
			}
			outputs[job.Task.ID] = job.OutputKey()
			return job.WriteOutput(ctx, strings.NewReader(strings.ToUpper(string(body))))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if ran := s3tasktest.Drain(t, st, &mux); len(ran) != 2 {
		t.Fatalf("drain ran %d tasks, want 2", len(ran))
	}
	for _, c := range []struct {
		task *s3task.Task
		ext  string
	}{{thumb, ".webp"}, {sheet, ".csv"}} {
		got := e.get(t, c.task.ID)
		want := dir(c.task.ID) + "output-attempt-1" + c.ext
		if got.Status != s3task.StatusCompleted || got.OutputPath != want || outputs[c.task.ID] != want {
			t.Errorf("%s: %s with output %s (Job.OutputKey %s); want completed with %s", c.task.Type, got.Status, got.OutputPath, outputs[c.task.ID], want)
		}
		dl, err := st.PresignDownload(e.ctx, c.task.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(dl.URL)
		if name := c.task.ID + "-output" + c.ext; !strings.HasSuffix(u.Path, "output-attempt-1"+c.ext) ||
			!strings.Contains(u.Query().Get("response-content-disposition"), name) {
			t.Errorf("%s: download %s; want output-attempt-1%s saved as %s", c.task.Type, dl.URL, c.ext, name)
		}
	}
}

// A Store whose options give a type no files of its own still finds a
// task's input and output where the record says, as an operator's tool
// or the next release must; a record that points elsewhere is not
// trusted.
func TestFilesFoundFromTheRecord(t *testing.T) {
	t.Parallel()
	st, e := setup(t, &imageFiles)
	plain := e.newStore(t, &s3task.StoreOptions{}) // no extensions, no Files

	thumb, err := st.Create(e.ctx, s3task.CreateParams{Type: "thumbnail"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.UploadInput(e.ctx, thumb.ID, strings.NewReader("png bytes")); err != nil {
		t.Fatal(err)
	}
	if got, err := plain.Submit(e.ctx, thumb.ID); err != nil || got.InputSize != int64(len("png bytes")) {
		t.Fatalf("Submit by a Store without Files = %v, input size %d; want the input.png the record names", err, got.InputSize)
	}
	var mux s3task.Mux
	if err := mux.HandleFunc("thumbnail", func(ctx context.Context, job *s3task.Job) error {
		return job.WriteOutput(ctx, strings.NewReader("webp bytes"))
	}); err != nil {
		t.Fatal(err)
	}
	s3tasktest.Drain(t, st, &mux)
	out, err := plain.OpenOutput(e.ctx, thumb.ID)
	if err != nil {
		t.Fatalf("OpenOutput by a Store without Files: %v", err)
	}
	body, _ := io.ReadAll(out)
	out.Close()
	if string(body) != "webp bytes" {
		t.Errorf("output read by a Store without Files: %q, want the .webp one", body)
	}

	// A record naming a key outside the pattern is not followed: the
	// output is derived from the attempt and the type's options.
	for _, bad := range []string{thumb.InputPath, e.folder(thumb.ID) + "output-attempt-12.webp", "elsewhere/output-attempt-1.webp"} {
		e.rewrite(t, thumb.ID, func(x *stored) { x.OutputPath = bad })
		dl, err := st.PresignDownload(e.ctx, thumb.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if u, _ := url.Parse(dl.URL); !strings.HasSuffix(u.Path, "/"+thumb.ID+"/output-attempt-1.webp") {
			t.Errorf("record output_object_path %s: download of %s, want the attempt's own output", bad, u.Path)
		}
	}
}

// StoreOptions.Files is checked like the Store's own file options.
func TestFilesOptionsChecked(t *testing.T) {
	t.Parallel()
	srv := s3tasktest.NewS3(t)
	for name, files := range map[string]map[string]s3task.FileOptions{
		"input extension":  {"img": {InputExt: "../x"}},
		"output extension": {"img": {OutputExt: ".we bp"}},
		"content type":     {"img": {InputContentType: "png"}},
		"long type":        {strings.Repeat("t", 129): {}},
		"type not UTF-8":   {"\xff": {}},
	} {
		_, err := s3task.NewStore(srv.Client(), srv.Bucket(), &s3task.StoreOptions{Files: files})
		if !errors.Is(err, s3task.ErrInvalidOptions) {
			t.Errorf("%s: NewStore = %v, want ErrInvalidOptions", name, err)
		}
	}
	// "" is the untyped tasks' entry, and the caller's map is copied.
	files := map[string]s3task.FileOptions{"": {InputExt: ".txt"}}
	st, err := s3task.NewStore(srv.Client(), srv.Bucket(), &s3task.StoreOptions{Files: files})
	if err != nil {
		t.Fatal(err)
	}
	files[""] = s3task.FileOptions{InputExt: ".bin"}
	task, err := st.Create(context.Background(), s3task.CreateParams{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(task.InputPath, "/input.txt") {
		t.Errorf("untyped task's InputPath %s, want input.txt from Files[\"\"]", task.InputPath)
	}
}
