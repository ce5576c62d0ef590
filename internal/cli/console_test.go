package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
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

func consoleTrainJob(name, state string) *trainer.TrainJob {
	return &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: trainer.TrainJobSpec{RuntimeRef: trainer.RuntimeRef{Name: "torch"}}, Status: trainer.TrainJobStatus{State: state}}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func keys(p pageView) []string {
	var keys []string
	for _, s := range p.Items {
		keys = append(keys, s.Key)
	}
	return keys
}

// TestTheHubShowsEachBrowserItsPage: a browser is shown one page of what its filter keeps, in
// order, with the counts and its selected TrainJob wherever that is; a list's first page shows
// before the rest is read; a list read again forgets what it no longer holds.
func TestTheHubShowsEachBrowserItsPage(t *testing.T) {
	h := newHub()
	var all []trainer.TrainJob
	for i := range 250 {
		all = append(all, *consoleTrainJob(fmt.Sprintf("tj-%03d", i), ""))
	}
	h.listing()
	h.page(all[:120])
	p := h.show(view{})
	assert.True(t, p.Listing, "the first list is not read whole yet")
	assert.Equal(t, 120, p.All)
	require.Len(t, p.Items, pageSize)
	assert.Equal(t, "ns/tj-000", p.Items[0].Key)
	h.page(all[120:])
	h.listed()
	p = h.show(view{page: 2})
	assert.False(t, p.Listing)
	assert.Equal(t, 250, p.All)
	assert.Equal(t, 250, p.Matching)
	assert.Equal(t, 2, p.Page)
	assert.Equal(t, "ns/tj-200", p.Items[0].Key)
	assert.Len(t, p.Items, 50)
	p = h.show(view{page: 7})
	assert.Equal(t, 2, p.Page, "a page past the last shows the last")
	assert.Equal(t, "ns/tj-249", p.Items[len(p.Items)-1].Key)

	// The filter: namespace, name, state, runtime or reason, in any case; and the state.
	failed := consoleTrainJob("tj-007", trainer.TrainJobFailed)
	failed.Status.Failure = &trainer.PodFailure{Reason: "OutOfMemory"}
	h.changed(watch.Modified, failed)
	h.changed(watch.Modified, consoleTrainJob("tj-240", trainer.TrainJobRunning))
	assert.Equal(t, []string{"ns/tj-240", "ns/tj-241", "ns/tj-242"}, keys(h.show(view{text: "tj-24"}))[:3])
	assert.Equal(t, []string{"ns/tj-007"}, keys(h.show(view{text: "outofmem"})))
	assert.Equal(t, []string{"ns/tj-240"}, keys(h.show(view{state: trainer.TrainJobRunning})))
	assert.Equal(t, 248, h.show(view{state: trainer.TrainJobPending}).Matching, "no state is Pending")
	assert.Equal(t, 248, h.show(view{text: "pend"}).Matching)
	assert.Equal(t, 250, h.show(view{text: "torch"}).Matching)
	spanning, err := parseView(url.Values{"q": {" TJ-007\x00failed "}})
	require.NoError(t, err)
	none := h.show(spanning)
	assert.Empty(t, none.Items, "the fields are apart: a filter cannot span two")
	assert.Equal(t, 0, h.show(view{text: "none such", page: 3}).Page, "nothing matches: the first page, not the one asked for")
	assert.Equal(t, []string{"ns/tj-007"}, keys(h.show(must(parseView(url.Values{"q": {" TJ-007 "}})))))

	// The selected TrainJob, wherever it is; none once it is gone.
	p = h.show(view{selected: "ns/tj-240"})
	require.NotNil(t, p.Selected)
	assert.Equal(t, trainer.TrainJobRunning, p.Selected.State)
	h.changed(watch.Deleted, consoleTrainJob("tj-240", ""))
	assert.Nil(t, h.show(view{selected: "ns/tj-240"}).Selected)
	assert.Equal(t, 249, h.show(view{}).All)

	// One made out of order is shown in order; a list read again forgets what it does not hold,
	// even what a list that failed partway held.
	h.changed(watch.Added, consoleTrainJob("a", ""))
	h.changed(watch.Added, consoleTrainJob("tj-1000", ""))
	assert.Equal(t, []string{"ns/a", "ns/tj-000"}, keys(h.show(view{}))[:2])
	assert.Equal(t, []string{"ns/tj-099", "ns/tj-100", "ns/tj-1000", "ns/tj-101"}, keys(h.show(view{page: 1}))[:4])
	h.listing()
	h.page(all[100:104]) // and it fails
	h.listing()
	h.page(all[100:103])
	h.listed()
	assert.Equal(t, []string{"ns/tj-100", "ns/tj-101", "ns/tj-102"}, keys(h.show(view{})))
	assert.Len(t, h.order, 3, "forgotten, but kept in order")
}

// TestTheHubWakesEachStreamOnce: however many changes come before a stream reads its page, it
// is woken once; it keeps nothing else.
func TestTheHubWakesEachStreamOnce(t *testing.T) {
	h := newHub()
	changed, done := h.subscribe()
	for i := range 1000 {
		h.changed(watch.Added, consoleTrainJob(fmt.Sprintf("tj-%d", i), ""))
	}
	<-changed
	select {
	case <-changed:
		t.Fatal("woken twice")
	default:
	}
	h.tell("forbidden")
	<-changed
	assert.Equal(t, "forbidden", h.show(view{}).Problem)
	done()
	h.changed(watch.Added, consoleTrainJob("after", ""))
	assert.Empty(t, changed, "woken after it ended")
}

// TestTheHubKeepsWhatItSawOfEachTrainJob: a report adds a point to the charts once, and a change
// of state adds to the timeline, but not the state it was first seen in.
func TestTheHubKeepsWhatItSawOfEachTrainJob(t *testing.T) {
	h := newHub()
	h.page([]trainer.TrainJob{*consoleTrainJob("a", "Created")})
	h.listed()
	reporting := consoleTrainJob("a", "Running")
	reporting.Status.TrainerStatus = &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](30), LastUpdatedTime: metav1.NewTime(time.Now()),
		Metrics: []trainer.Metric{{Name: "loss", Value: "0.3"}}}
	h.changed(watch.Modified, reporting)
	h.changed(watch.Modified, reporting) // the same report again adds no point
	assert.Equal(t, ptr.To[int32](30), h.show(view{}).Items[0].Progress)
	history, states := h.record("ns/a")
	assert.Len(t, history, 1)
	assert.Equal(t, map[string]string{"loss": "0.3"}, history[0].Metrics)
	require.Len(t, states, 1, "the state it was first seen in is not a change")
	assert.Equal(t, "Running", states[0].What)
}

// TestTheStreamSendsThePageAsItChanges reads the console's stream over HTTP: the scope, the page
// asked for, then the page again when it changes, and not when a change leaves it as it was.
func TestTheStreamSendsThePageAsItChanges(t *testing.T) {
	srv := httptest.NewUnstartedServer(nil)
	s := newConsoleServer(nil, "tok", srv.Listener.Addr().(*net.TCPAddr).Port, "namespace ns")
	srv.Config.Handler = s
	srv.Start()
	t.Cleanup(srv.Close)
	s.hub.page([]trainer.TrainJob{*consoleTrainJob("a-1", ""), *consoleTrainJob("b-1", "")})
	s.hub.listed()

	bad, err := http.Get(srv.URL + "/s/tok/api/stream?page=two")
	require.NoError(t, err)
	body, _ := io.ReadAll(bad.Body)
	_ = bad.Body.Close()
	assert.Equal(t, http.StatusBadRequest, bad.StatusCode)
	assert.Contains(t, string(body), `page "two": a page is a number from 0`)
	for page, want := range map[string]int{"-1": 0, "99999999999": maxPage} {
		v, err := parseView(url.Values{"page": {page}})
		require.NoError(t, err)
		assert.Equal(t, want, v.page, "page %s", page)
	}

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/s/tok/api/stream?q=A-&selected=ns/b-1", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	events := bufio.NewReader(resp.Body)
	next := func() (string, string) {
		t.Helper()
		var event, data string
		for {
			line, err := events.ReadString('\n')
			require.NoError(t, err)
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimSpace(strings.TrimPrefix(line, "event: "))
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimSpace(strings.TrimPrefix(line, "data: "))
			case line == "\n" && event != "":
				return event, data
			}
		}
	}
	page := func() pageView {
		t.Helper()
		event, data := next()
		require.Equal(t, "page", event)
		var p pageView
		require.NoError(t, json.Unmarshal([]byte(data), &p))
		return p
	}
	event, data := next()
	assert.Equal(t, "scope", event)
	assert.Equal(t, `"namespace ns"`, data)
	p := page()
	assert.Equal(t, []string{"ns/a-1"}, keys(p))
	assert.Equal(t, 2, p.All)
	require.NotNil(t, p.Selected, "the selected TrainJob is sent, though the filter hides it")
	assert.Equal(t, "ns/b-1", p.Selected.Key)

	// A change the page does not show sends nothing; the next that it shows is sent.
	s.hub.changed(watch.Modified, consoleTrainJob("a-1", ""))
	time.Sleep(2 * pageInterval) // apart: not sent together
	s.hub.changed(watch.Added, consoleTrainJob("a-2", trainer.TrainJobRunning))
	p = page()
	assert.Equal(t, []string{"ns/a-1", "ns/a-2"}, keys(p))
	s.hub.changed(watch.Deleted, consoleTrainJob("b-1", ""))
	p = page()
	assert.Nil(t, p.Selected, "the selected TrainJob is gone")
	assert.Equal(t, 2, p.All)
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
