// Package report owns the benchmark's results: the record each case appends
// to a JSON-lines file, the parsing of `go test -bench` output, percentiles,
// and the one table (markdown) printed at the end with each target beside
// its figure and whether it is met.
//
// It is pure apart from reading and appending the results file; it never runs
// a command. It holds no lock.
package report
