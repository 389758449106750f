// Package s3x classifies the errors of the AWS SDK's S3 client into the few
// outcomes the task store acts on.
package s3x

import (
	"errors"
	"net/http"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
)

func status(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// NotFound reports whether err says the object (or, for HEAD, anything) is
// not there.
func NotFound(err error) bool {
	switch code(err) {
	case "NoSuchKey", "NotFound":
		return true
	}
	return status(err) == 404 && code(err) != "NoSuchBucket"
}

// Lost reports whether a conditional write was refused because the object is
// not in the state the writer expected: 412 PreconditionFailed, 409
// ConditionalRequestConflict (another conditional write in flight), or 404 on
// an If-Match write to a key that is gone (AWS answers that way; other stores
// answer 412).
func Lost(err error) bool {
	switch code(err) {
	case "PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey":
		return true
	}
	switch status(err) {
	case 412, 409:
		return true
	}
	return false
}

// NotImplemented reports whether the server refused a feature outright.
func NotImplemented(err error) bool {
	return code(err) == "NotImplemented" || status(err) == 501
}

// NotModified reports whether a conditional GET answered 304: the object
// still has the ETag given in If-None-Match.
func NotModified(err error) bool {
	return code(err) == "NotModified" || status(err) == 304
}

// ServerTime returns the Date header of the response behind an error, if
// there was one: a 304 or a 412 still says what time the server has.
func ServerTime(err error) (time.Time, bool) {
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil {
		return time.Time{}, false
	}
	t, perr := http.ParseTime(re.Response.Header.Get("Date"))
	return t, perr == nil
}
