// A host application's module, outside this repository: .ci/outside.sh
// copies it to a temporary directory, points the replace below at the
// checkout and checks that depending on s3task (and its test kit) pulls in
// none of the examples' dependencies.
module example.com/host

go 1.25.0

require github.com/s3task/s3task v0.0.0-00010101000000-000000000000

replace github.com/s3task/s3task => ../..
