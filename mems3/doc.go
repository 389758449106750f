// Package mems3 is an S3 server that keeps its objects in memory, for
// developing, demonstrating and testing programs that use s3task (or any
// S3 client) with no AWS account, no bucket to create and nothing to
// install. It is gofakes3 (github.com/johannesboyne/gofakes3) with one
// bucket, a clock you may replace, and clients configured to reach it.
//
// # In process
//
// [New] starts a server with no socket. The clients [Server.Client]
// returns reach it through their transport, which calls the server's
// handler directly, so nothing listens and nothing can be reached from
// outside the process:
//
//	srv, err := mems3.New(nil) // bucket "tasks"
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer srv.Close()
//	store, err := s3task.NewStore(srv.Client(), srv.Bucket(), nil)
//
// Presigned URLs of an in-process server name a host that does not exist;
// follow them with an http.Client whose transport is [Server.Transport].
//
// # On a port
//
// [Listen] serves the same on a TCP address, a free port of 127.0.0.1 by
// default, for programs whose users follow presigned URLs with a browser
// or curl, or whose other processes share the bucket:
//
//	srv, err := mems3.Listen("", nil)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer srv.Close()
//	fmt.Println(srv.URL()) // http://127.0.0.1:<port>
//
// A program in another process reaches it with [NewClient] and that URL.
//
// # What it is for
//
// Development, demos and tests, in one process on one machine:
//
//   - Objects live in the memory of the process that started the server
//     and are lost when it exits (unless [Options.Backend] keeps them
//     elsewhere). Other processes can use a listening server only while
//     that one runs.
//   - Nothing is authenticated. The server checks no credentials and no
//     signatures: anyone who can reach its address can read, write and
//     delete every object. Presigned URLs never expire, and a presigned
//     POST form's policy (its size limit) is not enforced. Keep a listening
//     server on a loopback address.
//   - Conditional writes (If-None-Match: *, If-Match) are enforced, with
//     412 Precondition Failed as S3 answers, which is what s3task needs. A
//     few answers differ from AWS's: If-Match on a missing key gets 412
//     where AWS answers 404 NoSuchKey.
//   - It serves many clients and goroutines at once, but it is not tuned
//     for load: every object is held whole in memory.
//
// It is not for production: a real program runs against a real bucket,
// with an *s3.Client built from its own AWS configuration.
package mems3
