package kubeletserver

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// FuzzDecodeLogOptions decodes arbitrary queries as the kubelet's getContainerLogs does: it never
// panics, answers 400 or 422 with an error or options the kubelet's ValidatePodLogOptions accepts
// (no negative tailLines, a limitBytes and a sinceSeconds of at least 1, not both sinceSeconds and
// sinceTime), and the options it returns, encoded again, decode to themselves.
// Run with: go test -run=^$ -fuzz=FuzzDecodeLogOptions -fuzztime=15s ./pkg/kubeletserver
func FuzzDecodeLogOptions(f *testing.F) {
	for _, s := range []string{
		"", "tailLines=10", "tail=all", "tail=5&tailLines=1", "tail=&tailLines=-1", "tailLines=9223372036854775807",
		"tailLines=9223372036854775808", "limitBytes=0", "limitBytes=9223372036854775807", "sinceSeconds=0",
		"sinceSeconds=9223372036854775807", "sinceTime=9999-12-31T23:59:59Z", "sinceTime=0001-01-01T00:00:00Z&sinceSeconds=1",
		"sinceTime=null", "sinceTime=2026-11-27T08:00:00.123456789%2B02:00", "follow=0&previous=FALSE&timestamps=&follow=1",
		"stream=All", "stream=Stdout", "tailLines=1e3", "tailLines=0x10", "%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, query string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		opts, code, err := DecodeLogOptions(q)
		if err != nil {
			if code != http.StatusBadRequest && code != http.StatusUnprocessableEntity {
				t.Fatalf("query %q: error %v with code %d, want 400 or 422", query, err, code)
			}
			return
		}
		if code != 0 {
			t.Fatalf("query %q: code %d without an error", query, code)
		}
		if opts.Tail < 0 || (!opts.TailSet && opts.Tail != 0) || opts.LimitBytes < 0 || opts.SinceSeconds < 0 ||
			(opts.SinceSeconds > 0 && !opts.SinceTime.IsZero()) {
			t.Fatalf("query %q: options the kubelet refuses: %+v", query, opts)
		}
		again := url.Values{}
		if opts.TailSet {
			again.Set("tailLines", strconv.Itoa(opts.Tail))
		}
		if opts.LimitBytes > 0 {
			again.Set("limitBytes", strconv.Itoa(opts.LimitBytes))
		}
		if opts.SinceSeconds > 0 {
			again.Set("sinceSeconds", strconv.Itoa(opts.SinceSeconds))
		}
		sinceTime := opts.SinceTime
		if y := sinceTime.Year(); y > 9999 || y < 0 {
			sinceTime = time.Time{} // "9999-12-31T23:59:59-01:00": RFC 3339 has no year 10000 to encode it again
		}
		if !sinceTime.IsZero() {
			again.Set("sinceTime", sinceTime.Format(time.RFC3339Nano))
		}
		for k, v := range map[string]bool{"follow": opts.Follow, "previous": opts.Previous, "timestamps": opts.Timestamps} {
			again.Set(k, strconv.FormatBool(v))
		}
		got, code, err := DecodeLogOptions(again)
		if err != nil || !got.SinceTime.Equal(sinceTime) {
			t.Fatalf("query %q: options %+v encoded as %q decode to %+v, %d, %v", query, opts, again.Encode(), got, code, err)
		}
		got.SinceTime = opts.SinceTime
		if got != opts {
			t.Fatalf("query %q: options %+v encoded as %q decode to %+v", query, opts, again.Encode(), got)
		}
	})
}
