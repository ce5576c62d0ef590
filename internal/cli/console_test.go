package cli

import (
	"net/http"
	"net/http/httptest"
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

// TestTheConsoleAnswersOnlyItsOwnPage checks the console's doors without a cluster: the token,
// its cookie, the Host (DNS rebinding), and the header and Origin a change needs (cross-site
// requests).
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
	cookie := map[string]string{"Cookie": "trainjob-console-1234=s3cret"}
	with := func(more map[string]string) map[string]string {
		h := map[string]string{}
		for k, v := range cookie {
			h[k] = v
		}
		for k, v := range more {
			h[k] = v
		}
		return h
	}

	assert.Equal(t, http.StatusUnauthorized, do("GET", "/", own, nil).Code, "no token")
	assert.Equal(t, http.StatusUnauthorized, do("GET", "/?token=guess", own, nil).Code, "a wrong token")
	assert.Equal(t, http.StatusUnauthorized, do("GET", "/", own, map[string]string{"Cookie": "trainjob-console-1234=guess"}).Code)
	assert.Equal(t, http.StatusUnauthorized, do("GET", "/", own, map[string]string{"Cookie": "trainjob-console-9999=s3cret"}).Code,
		"another console's cookie")

	opened := do("GET", "/?token=s3cret", own, nil)
	assert.Equal(t, http.StatusSeeOther, opened.Code)
	assert.Equal(t, "/", opened.Header().Get("Location"), "the token leaves the address bar")
	set := opened.Result().Cookies()
	require.Len(t, set, 1)
	assert.Equal(t, "trainjob-console-1234", set[0].Name)
	assert.Equal(t, "s3cret", set[0].Value)
	assert.True(t, set[0].HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, set[0].SameSite)

	page := do("GET", "/", own, cookie)
	assert.Equal(t, http.StatusOK, page.Code)
	assert.Contains(t, page.Body.String(), `<script src="app.js" defer></script>`)
	assert.Contains(t, page.Header().Get("Content-Security-Policy"), "default-src 'self'")
	assert.Contains(t, page.Header().Get("Content-Security-Policy"), "frame-ancestors 'none'")
	assert.Equal(t, "no-referrer", page.Header().Get("Referrer-Policy"))
	assert.Equal(t, http.StatusOK, do("GET", "/app.js", "localhost:1234", cookie).Code)

	assert.Equal(t, http.StatusForbidden, do("GET", "/", "attacker.example:1234", cookie).Code, "DNS rebinding")
	assert.Equal(t, http.StatusForbidden, do("GET", "/?token=s3cret", "attacker.example:1234", nil).Code)

	assert.Equal(t, http.StatusForbidden, do("POST", "/api/action", own, cookie).Code, "a change without the console's header")
	assert.Equal(t, http.StatusForbidden, do("POST", "/api/action", own, with(map[string]string{
		consoleHeader: "1", "Origin": "http://attacker.example"})).Code, "a change from another origin")
	assert.Equal(t, http.StatusUnauthorized, do("POST", "/api/action", own, map[string]string{consoleHeader: "1"}).Code, "a change without the token")
	reached := do("POST", "/api/action", own, with(map[string]string{consoleHeader: "1", "Origin": "http://" + own}))
	assert.Equal(t, http.StatusBadRequest, reached.Code, "the console's own change reaches the handler, which refuses the body")
	assert.Contains(t, reached.Body.String(), "a request is {namespace, name, action}")
	assert.Equal(t, http.StatusNotFound, do("GET", "/api/action", own, cookie).Code, "changes are POSTs only")
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
