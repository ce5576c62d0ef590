package cli

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// stream sends the browser the page of TrainJobs it shows as server-sent events: the page at
// once, then again whenever it changes, at most every pageInterval. The browser asks for another
// page, filter or selection with another stream; it holds one page, and so does the stream.
func (s *consoleServer) stream(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported", http.StatusInternalServerError)
		return
	}
	v, err := parseView(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	changed, done := s.hub.subscribe()
	defer done()
	fmt.Fprintf(w, "event: scope\ndata: %q\n\n", s.scope)
	var last []byte
	keepAlive := time.NewTicker(30 * time.Second)
	defer keepAlive.Stop()
	for {
		p := s.hub.show(v)
		v.page = p.Page // The page shown: more TrainJobs later do not move the list to another.
		if msg := sseEvent("page", p); !bytes.Equal(msg, last) {
			if _, err := w.Write(msg); err != nil {
				return
			}
			last = msg
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-changed:
			// The changes that come meanwhile wait in changed, and go out in the next page.
			select {
			case <-r.Context().Done():
				return
			case <-time.After(pageInterval):
			}
		case <-keepAlive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		}
	}
}

// parseView reads the view a stream is asked for: ?q=<filter>&state=<state>&page=<n>&selected=<namespace/name>.
func parseView(q url.Values) (view, error) {
	// The filter looks in each field apart: the NUL that parts them in tracked.text is no
	// character of any.
	v := view{text: strings.ToLower(strings.ReplaceAll(strings.TrimSpace(q.Get("q")), "\x00", "")), state: q.Get("state"), selected: q.Get("selected")}
	if p := q.Get("page"); p != "" {
		page, err := strconv.Atoi(p)
		if err != nil {
			return view{}, fmt.Errorf("page %q: a page is a number from 0", p)
		}
		// A page before the first shows the first, one past the last the last.
		v.page = min(max(page, 0), maxPage)
	}
	return v, nil
}

// detailView is a TrainJob as the console's page shows it.
type detailView struct {
	Summary      summary          `json:"summary"`
	Why          *cause           `json:"why,omitempty"`
	Conditions   []conditionView  `json:"conditions"`
	Tree         []treeNode       `json:"tree"`
	Events       []eventView      `json:"events"`
	Notes        []string         `json:"notes,omitempty"`
	History      []point          `json:"history"`
	Timeline     []mark           `json:"timeline"`
	Ranks        int              `json:"ranks"`
	Initializers []string         `json:"initializers,omitempty"`
	Metrics      []trainer.Metric `json:"metrics,omitempty"`
}

type conditionView struct {
	Type    string    `json:"type"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Time    time.Time `json:"time"`
}

type eventView struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Object  string    `json:"object"`
	Message string    `json:"message"`
}

// treeNode is one object made for the TrainJob, at its depth in the tree.
type treeNode struct {
	Depth  int    `json:"depth"`
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	State  string `json:"state"`
	Detail string `json:"detail,omitempty"`
}

// detail answers a TrainJob's describe as JSON, with what the console saw of it while it ran.
func (s *consoleServer) detail(w http.ResponseWriter, r *http.Request) {
	ns, name := r.URL.Query().Get("namespace"), r.URL.Query().Get("name")
	t, err := gather(r.Context(), s.c, ns, name)
	if err != nil {
		writeError(w, err)
		return
	}
	now := time.Now()
	history, states := s.hub.record(ns + "/" + name)
	if history == nil {
		history = []point{}
	}
	v := detailView{
		Summary: summarize(t.tj), Why: diagnose(t, now), Tree: t.nodes(), Notes: t.notes,
		History: history, Timeline: timeline(t.tj, states),
		Conditions: []conditionView{}, Events: []eventView{},
	}
	if ts := t.tj.Status.TrainerStatus; ts != nil {
		v.Metrics = ts.Metrics
	}
	for _, c := range t.tj.Status.Conditions {
		v.Conditions = append(v.Conditions, conditionView{c.Type, string(c.Status), c.Reason, c.Message, c.LastTransitionTime.Time})
	}
	for _, e := range t.events[max(len(t.events)-maxEvents, 0):] {
		v.Events = append(v.Events, eventView{eventTime(&e), e.Type, e.Reason, e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name, e.Message})
	}
	if t.jobSet != nil {
		v.Ranks = rankCount(t.jobSet, trainer.AncestorTrainer)
		for _, step := range []string{trainer.AncestorDatasetInitializer, trainer.AncestorModelInitializer} {
			if stepJob(t.jobSet, step) != nil {
				v.Initializers = append(v.Initializers, strings.TrimSuffix(step, "-initializer"))
			}
		}
	}
	writeJSON(w, http.StatusOK, v)
}

// nodes is the tree as the page draws it.
func (t *tree) nodes() []treeNode {
	nodes := []treeNode{}
	if js := t.jobSet; js != nil {
		nodes = append(nodes, treeNode{0, "JobSet", js.Name, jobSetState(js), fmt.Sprintf("restarts %d", js.Status.Restarts)})
		for _, j := range t.jobs {
			nodes = append(nodes, treeNode{1, "Job", j.Name, "", fmt.Sprintf("active %d, ready %d, succeeded %d, failed %d",
				j.Status.Active, ptr.Deref(j.Status.Ready, 0), j.Status.Succeeded, j.Status.Failed)})
			for i := range t.pods {
				if p := &t.pods[i]; metav1.IsControlledBy(p, &j) {
					nodes = append(nodes, treeNode{2, "Pod", p.Name, podState(p), podDetail(p)})
				}
			}
		}
	}
	if g := t.gang; g != nil {
		nodes = append(nodes, treeNode{0, "PodGroup", g.name, cmp.Or(g.Phase, "no phase yet"), fmt.Sprintf("%s, minMember %d", g.Scheduler, g.MinMember)})
	}
	for _, m := range t.mpi {
		kind, rest, _ := strings.Cut(m, " ")
		name, detail, _ := strings.Cut(rest, " ")
		nodes = append(nodes, treeNode{0, kind, name, "", detail})
	}
	if wl := t.workload; wl != nil {
		nodes = append(nodes, treeNode{0, "Workload", wl.GetName(), workloadState(wl), "Kueue"})
	}
	return nodes
}

// logs streams the logs of a TrainJob's rank, of all ranks, or of an initializer, as
// server-sent events of one line each.
func (s *consoleServer) logs(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported", http.StatusInternalServerError)
		return
	}
	q := r.URL.Query()
	l := &logsOptions{follow: q.Get("follow") == "true", initializer: q.Get("initializer"), tail: -1, lines: true}
	if q.Get("rank") == "all" {
		l.all, l.maxRanks = true, maxRanksFollowed
	} else if rank, err := strconv.Atoi(cmp.Or(q.Get("rank"), "0")); err == nil && rank >= 0 {
		l.rank = rank
	} else {
		http.Error(w, fmt.Sprintf("rank %q: a rank is a number from 0, or all", q.Get("rank")), http.StatusBadRequest)
		return
	}
	if tail, err := strconv.ParseInt(q.Get("tail"), 10, 64); err == nil {
		l.tail = tail
	}
	// A slot for each stream it opens, once it knows how many: the API server serves every tab's
	// streams. A view refused says so as a problem event, which the page shows.
	l.streams = s.takeStreams
	w.Header().Set("Content-Type", "text/event-stream")
	out := &sseLines{w: w, flush: flusher.Flush}
	l.Options = &Options{}
	l.Out, l.ErrOut = out.writer("line"), out.writer("status")
	c := *s.c
	c.namespace = q.Get("namespace")
	if err := l.runWith(r.Context(), &c, q.Get("name")); err != nil && r.Context().Err() == nil {
		_, _ = out.writer("problem").Write([]byte(err.Error()))
	}
	_, _ = out.writer("end").Write(nil)
}

// sseLines turns writes into server-sent events, one a write: the log streams write a line each.
type sseLines struct {
	mu    sync.Mutex
	w     http.ResponseWriter
	flush func()
}

type sseWriter struct {
	lines *sseLines
	event string
}

func (s *sseLines) writer(event string) *sseWriter { return &sseWriter{s, event} }

func (w *sseWriter) Write(p []byte) (int, error) {
	w.lines.mu.Lock()
	defer w.lines.mu.Unlock()
	data, _ := json.Marshal(strings.TrimSuffix(string(p), "\n"))
	if _, err := fmt.Fprintf(w.lines.w, "event: %s\ndata: %s\n\n", w.event, data); err != nil {
		return 0, err
	}
	w.lines.flush()
	return len(p), nil
}

// action suspends, resumes or deletes a TrainJob with the user's credentials: the API server
// allows it or says why not, and the page shows its words.
func (s *consoleServer) action(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Namespace string    `json:"namespace"`
		Name      string    `json:"name"`
		UID       types.UID `json:"uid"`
		Action    string    `json:"action"`
	}
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req)
	if err == nil && req.UID == "" {
		err = errors.New("uid is missing")
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "a request is {namespace, name, uid, action}: " + err.Error()})
		return
	}
	key := types.NamespacedName{Namespace: req.Namespace, Name: req.Name}
	var msg string
	switch req.Action {
	case "suspend", "resume":
		msg, err = setSuspended(r.Context(), s.c, key, req.UID, req.Action == "suspend")
	case "delete":
		tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name}}
		err = s.c.Delete(r.Context(), tj, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &req.UID})
		switch {
		case apierrors.IsConflict(err):
			err = sameNameError(key)
		case err == nil:
			msg = "trainjob.trainer.kubeflow.org/" + req.Name + " deleted"
		}
	default:
		err = fmt.Errorf("unknown action %q: suspend, resume or delete", req.Action)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"message": msg})
}

// writeError answers an error with the API server's status and words, so that the page shows
// why the cluster refused.
func writeError(w http.ResponseWriter, err error) {
	code := http.StatusBadRequest
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code != 0 {
		code = int(status.Status().Code)
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
