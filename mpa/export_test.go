package mpa

// SetWriterCopyLen sets the longest payload piece a Writer copies into
// its arena (WriterCopyLen) and returns a function that restores it;
// for benchmarks that sweep it, never in parallel tests.
func SetWriterCopyLen(n int) (restore func()) {
	old := writerCopyLen
	writerCopyLen = n
	return func() { writerCopyLen = old }
}

// BigSlack is how far past what it needs a Reader reads while its reads
// are limited.
const BigSlack = bigSlack
