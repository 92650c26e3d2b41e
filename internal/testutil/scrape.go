package testutil

import (
	"io"
	"net/http"
	"testing"
)

// Scrape returns the body of an HTTP GET of url (a metrics or health
// endpoint the test started), failing tb if the request fails. The
// status code is not looked at: the body says what the test checks.
func Scrape(tb testing.TB, url string) string {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
