// Package exactclock lets the test kit tell a Store that its clock is the
// S3 server's own. A Store otherwise learns the server's clock from the Date
// headers of the responses, which have a resolution of one second, and so
// judges a start or a retry due up to a second late; in the kit, whose
// in-memory S3 and Stores share one process, that second would make
// Advance(d) by exactly a task's wait fall short.
package exactclock

// Use makes store, a *s3task.Store whose StoreOptions.Clock reads the S3
// server's clock, take that clock as exact and ignore Date headers. Package
// s3task sets it when it is initialised.
var Use func(store any)
