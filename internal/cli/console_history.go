package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	historyv1alpha1 "github.com/trainjob/operator/internal/history/apis/v1alpha1"
)

// historyPageSize is how many runs a page of the console's History view holds.
const historyPageSize = 50

// runRow is a run as the History view's list shows it.
type runRow struct {
	Key        string     `json:"key"`
	Namespace  string     `json:"namespace"`
	Name       string     `json:"name"`
	TrainJob   string     `json:"trainJob"`
	State      string     `json:"state"`
	Reason     string     `json:"reason,omitempty"`
	Runtime    string     `json:"runtime"`
	Creator    string     `json:"creator,omitempty"`
	Nodes      int32      `json:"nodes"`
	GPUs       int64      `json:"gpusPerNode"`
	GPUSeconds int64      `json:"gpuSeconds"`
	Running    int64      `json:"runningSeconds"`
	Created    time.Time  `json:"created"`
	Finished   *time.Time `json:"finished,omitempty"`
	Deleted    bool       `json:"deleted"`
}

type runsPage struct {
	Items    []runRow `json:"items"`
	Continue string   `json:"continue,omitempty"`
}

// historyFiltersOf reads the History view's filters, as `kubectl trainjob history` takes them:
// ?name=&state=&runtime=&creator=&since=&labels=, in the console's scope.
func (s *consoleServer) historyFiltersOf(q url.Values) (*historyFilters, string) {
	return &historyFilters{
		allNamespaces: s.allNamespaces, selector: q.Get("labels"), state: q.Get("state"),
		runtime: q.Get("runtime"), creator: q.Get("creator"), since: q.Get("since"),
	}, q.Get("name")
}

// runs answers a page of the history's runs, newest first, read with the user's credentials:
// the history's API shows only the runs of namespaces whose TrainJobs the user may read.
func (s *consoleServer) runs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, name := s.historyFiltersOf(q)
	opts, err := f.options(s.c, name)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	opts = append(opts, client.Limit(historyPageSize))
	if token := q.Get("continue"); token != "" {
		opts = append(opts, client.Continue(token))
	}
	list := &historyv1alpha1.TrainJobRunList{}
	if err := s.c.List(r.Context(), list, opts...); err != nil {
		writeError(w, historyError(err))
		return
	}
	page := runsPage{Items: make([]runRow, 0, len(list.Items)), Continue: list.Continue}
	for i := range list.Items {
		run := &list.Items[i]
		row := runRow{
			Key: run.Namespace + "/" + run.Name, Namespace: run.Namespace, Name: run.Name, TrainJob: run.Spec.TrainJobName,
			State: run.Status.State, Reason: run.Status.Reason, Runtime: run.Spec.Runtime.Name, Creator: run.Spec.Creator,
			Nodes: run.Spec.Nodes, GPUs: run.Spec.GPUsPerNode, GPUSeconds: run.Status.GPUSeconds,
			Running: run.Status.RunningSeconds, Created: run.CreationTimestamp.Time, Deleted: run.Status.DeletedTime != nil,
		}
		if t := run.Status.FinishedTime; t != nil {
			row.Finished = &t.Time
		}
		page.Items = append(page.Items, row)
	}
	writeJSON(w, http.StatusOK, page)
}

// run answers one run whole, for the History view's details and comparisons.
func (s *consoleServer) run(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ns, name := q.Get("namespace"), q.Get("name")
	if ns == "" || name == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("a run is ?namespace=&name=, not %q/%q", ns, name)})
		return
	}
	run := &historyv1alpha1.TrainJobRun{}
	if err := s.c.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
		writeError(w, historyError(err))
		return
	}
	writeJSON(w, http.StatusOK, run)
}
