package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// TestTheConsoleAnswersOnlyItsOwnPage checks the console's doors without a cluster: the token in
// the path (no cookie, which a browser would send to every port of 127.0.0.1), the Host (DNS
// rebinding), and the header and Origin a change needs (cross-site requests).
func TestTheConsoleAnswersOnlyItsOwnPage(t *testing.T) {
	s := newConsoleServer(nil, "s3cret", 1234, "namespace ns")
	do := func(method, target, host string, headers map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, target, strings.NewReader("{"))
		r.Host = host
		for k, v := range headers {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w
	}
	const own = "127.0.0.1:1234"

	for _, path := range []string{"/", "/app.js", "/api/stream", "/s/", "/s/guess/", "/s/s3cre/", "/s/s3cretX/", "/S/s3cret/", "/?token=s3cret", "/app.js?s=/s/s3cret/"} {
		assert.Equal(t, http.StatusUnauthorized, do("GET", path, own, nil).Code, path)
	}
	assert.Equal(t, "/s/s3cret/", s.prefix())
	bare := do("GET", "/s/s3cret", own, nil)
	assert.Equal(t, http.StatusSeeOther, bare.Code)
	assert.Equal(t, "/s/s3cret/", bare.Header().Get("Location"), "the page's relative links need the slash")

	page := do("GET", "/s/s3cret/", own, nil)
	assert.Equal(t, http.StatusOK, page.Code)
	assert.Contains(t, page.Body.String(), `<script src="app.js" defer></script>`)
	assert.Empty(t, page.Result().Cookies(), "no cookie: a browser would send it to every port of the host")
	assert.Contains(t, page.Header().Get("Content-Security-Policy"), "default-src 'self'")
	assert.Contains(t, page.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'")
	assert.Equal(t, "no-referrer", page.Header().Get("Referrer-Policy"), "the token never leaves in a Referer")
	assert.Equal(t, http.StatusOK, do("GET", "/s/s3cret/app.js", "localhost:1234", nil).Code)

	assert.Equal(t, http.StatusForbidden, do("GET", "/s/s3cret/", "attacker.example:1234", nil).Code, "DNS rebinding")
	assert.Equal(t, http.StatusForbidden, do("GET", "/s/s3cret/", "127.0.0.1:9999", nil).Code)

	const action = "/s/s3cret/api/action"
	assert.Equal(t, http.StatusForbidden, do("POST", action, own, nil).Code, "a change without the console's header")
	assert.Equal(t, http.StatusForbidden, do("POST", action, own, map[string]string{consoleHeader: "1", "Origin": "http://attacker.example"}).Code,
		"a change from another origin")
	assert.Equal(t, http.StatusForbidden, do("POST", action, own, map[string]string{consoleHeader: "1", "Origin": "null"}).Code)
	assert.Equal(t, http.StatusUnauthorized, do("POST", "/s/guess/api/action", own, map[string]string{consoleHeader: "1"}).Code, "a change without the token")
	reached := do("POST", action, own, map[string]string{consoleHeader: "1", "Origin": "http://" + own})
	assert.Equal(t, http.StatusBadRequest, reached.Code, "the console's own change reaches the handler, which refuses the body")
	assert.Contains(t, reached.Body.String(), "a request is {namespace, name, uid, action}")
	assert.Equal(t, http.StatusNotFound, do("GET", action, own, nil).Code, "changes are POSTs only")
	bad := do("GET", "/s/s3cret/api/logs?rank=abc", own, nil)
	assert.Equal(t, http.StatusBadRequest, bad.Code)
	assert.Contains(t, bad.Body.String(), `rank "abc": a rank is a number from 0, or all`)

	// The log streams of every tab together are bounded: a view takes a slot for each stream it
	// opens, all or none, and gives them back when it ends.
	release, err := s.takeStreams(maxLogStreams - 2)
	require.NoError(t, err)
	_, err = s.takeStreams(3)
	assert.ErrorContains(t, err, "close a log view")
	assert.Len(t, s.streams, maxLogStreams-2, "a refused view kept slots")
	two, err := s.takeStreams(2)
	require.NoError(t, err)
	two()
	release()
	assert.Empty(t, s.streams, "slots not given back")
}

func TestTheHubSendsASnapshotThenChanges(t *testing.T) {
	h := newHub()
	tj := func(name, state string) *trainer.TrainJob {
		return &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Status: trainer.TrainJobStatus{State: state}}
	}
	h.listed([]trainer.TrainJob{*tj("b", "Running"), *tj("a", "Created")})
	events, done := h.subscribe()
	snapshot := string(<-events)
	assert.True(t, strings.HasPrefix(snapshot, "event: snapshot\ndata: "), snapshot)
	assert.Less(t, strings.Index(snapshot, `"key":"ns/a"`), strings.Index(snapshot, `"key":"ns/b"`), "sorted by key")

	reporting := tj("a", "Running")
	reporting.Status.TrainerStatus = &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](30), LastUpdatedTime: metav1.NewTime(time.Now()),
		Metrics: []trainer.Metric{{Name: "loss", Value: "0.3"}}}
	h.changed(watch.Modified, reporting)
	assert.Contains(t, string(<-events), `"progress":30`)
	h.changed(watch.Modified, reporting) // the same report again adds no point
	<-events
	h.changed(watch.Deleted, tj("b", ""))
	assert.Equal(t, "event: delete\ndata: {\"key\":\"ns/b\"}\n\n", string(<-events))

	history, states := h.record("ns/a")
	assert.Len(t, history, 1)
	assert.Equal(t, map[string]string{"loss": "0.3"}, history[0].Metrics)
	require.Len(t, states, 1, "the state it was first seen in is not a change")
	assert.Equal(t, "Running", states[0].What)

	// A browser that falls too far behind is dropped, and its EventSource connects again.
	for range subscriberBuffer + 1 {
		h.changed(watch.Modified, tj("c", "Running"))
	}
	drained := 0
	for range events {
		drained++
	}
	assert.Equal(t, subscriberBuffer, drained, "the stream ends once the buffer is full")
	done() // ending a dropped subscription is harmless
}

// TestOpenBrowserKeepsTheTokenOffCommandLines opens the console with a stand-in browser: what
// it is given on its command line, which every local user may read, is a page only the user
// may read, which holds the URL.
func TestOpenBrowserKeepsTheTokenOffCommandLines(t *testing.T) {
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "xdg-open"), []byte("#!/bin/sh\necho \"$@\" > "+args+"\n"), 0o755))
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	const url = "http://127.0.0.1:1234/s/s3cret/"
	require.NoError(t, openBrowser(url))
	var given string
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(args)
		given = strings.TrimSpace(string(b))
		return err == nil && given != ""
	}, 10*time.Second, 50*time.Millisecond)
	assert.NotContains(t, given, "s3cret", "the token is on a command line")
	info, err := os.Stat(given)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the page is the user's only")
	page, err := os.ReadFile(given)
	require.NoError(t, err)
	assert.Contains(t, string(page), `content="0;url=`+url+`"`)
}

// TestTheHubKeepsABoundedNumberOfReports: whatever the scope, the reports the console keeps for
// its charts stay under maxPoints: finished TrainJobs' histories go first, then running ones
// become coarser, each keeping its latest report.
func TestTheHubKeepsABoundedNumberOfReports(t *testing.T) {
	h := newHub()
	start := time.Now().Add(-48 * time.Hour)
	report := func(name string, finished bool, i int) {
		tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Status: trainer.TrainJobStatus{State: "Running",
			TrainerStatus: &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](1), LastUpdatedTime: metav1.NewTime(start.Add(time.Duration(i) * time.Second)),
				Metrics: []trainer.Metric{{Name: "loss", Value: "0.3"}}}}}
		if finished {
			tj.Status.Conditions = []metav1.Condition{{Type: trainer.TrainJobComplete, Status: metav1.ConditionTrue}}
		}
		h.changed(watch.Modified, tj)
	}
	for j := range 5 {
		for i := range maxHistory {
			report(fmt.Sprintf("done-%d", j), true, i)
		}
	}
	for j := range 30 {
		for i := range maxHistory {
			report(fmt.Sprintf("running-%d", j), false, 100000+i)
		}
	}
	total := 0
	for key, tracked := range h.jobs {
		total += len(tracked.history)
		if strings.HasPrefix(key, "ns/running-") {
			require.NotEmpty(t, tracked.history, key)
			assert.Equal(t, start.Add(time.Duration(100000+maxHistory-1)*time.Second), tracked.history[len(tracked.history)-1].Time, "%s lost its latest report", key)
		} else {
			assert.Empty(t, tracked.history, "%s, finished, kept its reports over running ones'", key)
		}
	}
	assert.Equal(t, total, h.points)
	assert.LessOrEqual(t, total, maxPoints)
	assert.Greater(t, total, maxPoints/2, "far more was dropped than needed")
	gone := len(h.jobs["ns/running-0"].history)
	h.changed(watch.Deleted, &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "running-0"}})
	assert.Equal(t, total-gone, h.points, "a deleted TrainJob's reports are still counted")
}

// TestTheHubShedsDownToAReportEach: with more running TrainJobs than maxPoints, each keeps its
// latest report and no more, and a report past that does not go over every TrainJob again.
func TestTheHubShedsDownToAReportEach(t *testing.T) {
	h := newHub()
	start := time.Now()
	for j := range maxPoints + 100 {
		for i := range 2 {
			h.changed(watch.Modified, &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("tj-%d", j)},
				Status: trainer.TrainJobStatus{State: "Running", TrainerStatus: &trainer.TrainerStatus{LastUpdatedTime: metav1.NewTime(start.Add(time.Duration(i) * time.Second))}}})
		}
	}
	assert.LessOrEqual(t, h.points, len(h.jobs)+maxPoints/10, "more than a report each")
	for key, tracked := range h.jobs {
		require.NotEmpty(t, tracked.history, key)
	}
}
