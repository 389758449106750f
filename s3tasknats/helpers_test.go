package s3tasknats_test

import (
	"github.com/s3task/s3task"
	"github.com/s3task/s3task/s3event"
)

type s3eventNotifier = s3event.Notifier

// notifierFunc adapts a function to s3event.Notifier.
type notifierFunc func(s3task.ObjectEvent) bool

func (f notifierFunc) Notify(e s3task.ObjectEvent) bool { return f(e) }
