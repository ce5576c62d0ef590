package apiserver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/history"
	historyv1alpha1 "github.com/trainjob/operator/internal/history/apis/v1alpha1"
)

// runs serves TrainJobRuns from the history's store, read-only.
type runs struct {
	store *history.Store
	now   func() time.Time
}

var (
	_ rest.Storage              = &runs{}
	_ rest.Scoper               = &runs{}
	_ rest.Getter               = &runs{}
	_ rest.Lister               = &runs{}
	_ rest.SingularNameProvider = &runs{}
)

func (r *runs) New() runtime.Object     { return &historyv1alpha1.TrainJobRun{} }
func (r *runs) NewList() runtime.Object { return &historyv1alpha1.TrainJobRunList{} }
func (r *runs) Destroy()                {}
func (r *runs) NamespaceScoped() bool   { return true }
func (r *runs) GetSingularName() string { return "trainjobrun" }
func (r *runs) resource() schema.GroupResource {
	return historyv1alpha1.GroupVersion.WithResource(historyv1alpha1.Resource).GroupResource()
}

// uidSuffix is how a run's name ends: a dot and the first eight characters of its UID.
var uidSuffix = regexp.MustCompile(`\.([0-9a-f]{8})$`)

// RunName is the name of the run of a TrainJob with name and uid.
func RunName(name string, uid types.UID) string {
	u := strings.ReplaceAll(string(uid), "-", "")
	return name + "." + u[:min(8, len(u))]
}

// Get finds a run by its name, or by its TrainJob's name alone: then its latest run.
func (r *runs) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	trainJob, prefix := name, ""
	if m := uidSuffix.FindStringSubmatch(name); m != nil {
		trainJob, prefix = strings.TrimSuffix(name, m[0]), m[1]
	}
	page, err := r.store.List(ctx, history.Query{Namespace: ns, Name: trainJob, UIDPrefix: prefix, Limit: 1})
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if len(page.Records) == 0 {
		return nil, apierrors.NewNotFound(r.resource(), name)
	}
	return toRun(page.Records[0]), nil
}

// List lists runs, newest first, by the request's namespace, label selector, field selector
// (fieldSelectors) and paging.
func (r *runs) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	q := history.Query{Namespace: ns}
	if opts != nil {
		if opts.LabelSelector != nil && !opts.LabelSelector.Empty() {
			q.Labels = opts.LabelSelector
		}
		if opts.FieldSelector != nil {
			err := r.selectFields(&q, opts.FieldSelector)
			if errors.Is(err, errNone) {
				return &historyv1alpha1.TrainJobRunList{Items: []historyv1alpha1.TrainJobRun{}}, nil
			}
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
		}
		q.Limit, q.Continue = int(opts.Limit), opts.Continue
		if opts.Limit > history.MaxPage {
			q.Limit = history.MaxPage
		}
	}
	page, err := r.store.List(ctx, q)
	switch {
	case errors.Is(err, history.ErrBadContinue):
		return nil, apierrors.NewBadRequest(err.Error())
	case errors.Is(err, history.ErrBadSelector):
		return nil, apierrors.NewBadRequest(err.Error())
	case err != nil:
		return nil, apierrors.NewInternalError(err)
	}
	list := &historyv1alpha1.TrainJobRunList{ListMeta: metav1.ListMeta{Continue: page.Continue}}
	list.Items = make([]historyv1alpha1.TrainJobRun, 0, len(page.Records))
	for _, rec := range page.Records {
		list.Items = append(list.Items, *toRun(rec))
	}
	return list, nil
}

// FieldSelectors are the fields a list selects runs by, each with = or ==; status.state with !=
// too. since is a duration ("24h", "30d") or a time (RFC 3339): the runs created since then.
var FieldSelectors = []string{"metadata.name", "metadata.namespace", "spec.trainJobName", "spec.creator", "spec.runtime.name", "status.state", "since"}

// states are the states a run may have, for status.state!=.
var states = []string{"Pending", "Created", "Running", "Suspended", "Complete", "Failed"}

// errNone says that a field selector selects no run.
var errNone = errors.New("no run")

func (r *runs) selectFields(q *history.Query, selector fields.Selector) error {
	seen := map[string]bool{}
	for _, req := range selector.Requirements() {
		if req.Operator != selection.Equals && req.Operator != selection.DoubleEquals &&
			(req.Operator != selection.NotEquals || req.Field != "status.state") {
			return fmt.Errorf("field selector %q: the history selects by %s with =, and status.state with != too", req.Field+string(req.Operator)+req.Value, strings.Join(FieldSelectors, ", "))
		}
		// Each field once: the terms of a selector all hold, and the authorizer checked the
		// run's name as the selector gave it.
		if seen[req.Field] {
			return fmt.Errorf("field selector: %s is given twice; the history takes each field once", req.Field)
		}
		seen[req.Field] = true
		switch req.Field {
		case "metadata.namespace":
			if q.Namespace != "" && q.Namespace != req.Value {
				return errNone // a namespace that is not the request's
			}
			q.Namespace = req.Value
		case "metadata.name":
			m := uidSuffix.FindStringSubmatch(req.Value)
			if m == nil {
				return fmt.Errorf("field selector metadata.name=%s: a run's name is its TrainJob's and a dot and 8 characters of its UID: select a TrainJob's runs by spec.trainJobName", req.Value)
			}
			name := strings.TrimSuffix(req.Value, m[0])
			if q.Name != "" && q.Name != name {
				return errNone // the run of another TrainJob than spec.trainJobName's
			}
			q.Name, q.UIDPrefix = name, m[1]
		case "spec.trainJobName":
			if q.Name != "" && q.Name != req.Value {
				return errNone // the run of another TrainJob than metadata.name's
			}
			q.Name = req.Value
		case "spec.creator":
			q.Creator = req.Value
		case "spec.runtime.name":
			q.Runtime = req.Value
		case "status.state":
			if req.Operator == selection.NotEquals {
				for _, s := range states {
					if s != req.Value {
						q.States = append(q.States, s)
					}
				}
			} else {
				q.States = append(q.States, req.Value)
			}
		case "since":
			since, err := parseSince(req.Value, r.now())
			if err != nil {
				return err
			}
			q.Since = since
		default:
			return fmt.Errorf("field selector %q: the history selects by %s", req.Field, strings.Join(FieldSelectors, ", "))
		}
	}
	return nil
}

// parseSince reads a since: a duration before now (Go's, or a number of days: "30d"), or a time.
func parseSince(value string, now time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(value, "d"); ok {
		var n int
		if _, err := fmt.Sscanf(days, "%d", &n); err == nil && fmt.Sprint(n) == days && n >= 0 {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(value); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, value); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("field selector since=%s: a duration (24h, 30d) or a time (2026-11-01T00:00:00Z)", value)
}

// toRun is a record as the API serves it.
func toRun(r *history.Record) *historyv1alpha1.TrainJobRun {
	run := &historyv1alpha1.TrainJobRun{
		TypeMeta: metav1.TypeMeta{APIVersion: historyv1alpha1.GroupVersion.String(), Kind: "TrainJobRun"},
		ObjectMeta: metav1.ObjectMeta{
			Name: RunName(r.Name, types.UID(r.UID)), Namespace: r.Namespace, UID: types.UID(r.UID),
			Labels: r.Labels, CreationTimestamp: metav1.NewTime(r.Created),
		},
		Spec: historyv1alpha1.TrainJobRunSpec{
			TrainJobName: r.Name, Creator: r.Creator,
			Runtime:   historyv1alpha1.RuntimeReference{Kind: r.Runtime.Kind, Name: r.Runtime.Name, Digest: r.Runtime.Digest},
			Framework: r.Framework, Image: r.Image, Nodes: r.Nodes, ProcsPerNode: r.ProcsPerNode, GPUsPerNode: r.GPUsPerNode, Queue: r.Queue,
		},
		Status: historyv1alpha1.TrainJobRunStatus{
			State: r.State, Reason: r.Reason, Message: r.Message,
			AdmittedTime: metaTime(r.Admitted), FirstRunningTime: metaTime(r.FirstRunning),
			FinishedTime: metaTime(r.Finished), DeletedTime: metaTime(r.Deleted),
			Failure: toFailure(r.Failure), Restarts: r.Restarts, Stalls: r.Stalls, FinalMetrics: toMetrics(r.FinalMetrics),
			RunningSeconds: seconds(r.RunningSeconds), NodeSeconds: seconds(r.NodeSeconds), GPUSeconds: seconds(r.GPUSeconds),
		},
	}
	for _, c := range r.RestartCauses {
		run.Status.RestartCauses = append(run.Status.RestartCauses, historyv1alpha1.RestartCause{
			Time: metav1.NewTime(c.Time), Reason: c.Reason, Message: c.Message, Node: c.Node, ExitCode: c.ExitCode,
		})
	}
	for _, p := range r.Progress {
		run.Status.Progress = append(run.Status.Progress, historyv1alpha1.ProgressPoint{
			Time: metav1.NewTime(p.Time), Percent: p.Percent, Metrics: toMetrics(p.Metrics), Restarts: p.Restarts,
		})
	}
	if r.RunningSince != nil {
		// What a running run used so far.
		extra := time.Since(*r.RunningSince).Seconds()
		run.Status.RunningSeconds = seconds(r.RunningSeconds + extra)
		run.Status.NodeSeconds = seconds(r.NodeSeconds + extra*float64(r.Nodes))
		run.Status.GPUSeconds = seconds(r.GPUSeconds + extra*float64(r.Nodes)*float64(r.GPUsPerNode))
	}
	return run
}

func toFailure(f *trainer.PodFailure) *historyv1alpha1.PodFailure {
	if f == nil {
		return nil
	}
	return &historyv1alpha1.PodFailure{
		Pod: f.Pod, Rank: f.Rank, Container: f.Container, ExitCode: f.ExitCode, Reason: f.Reason,
		Message: f.Message, Node: f.Node, NodeCaused: f.NodeCaused, Time: f.Time,
	}
}

func toMetrics(metrics []trainer.Metric) []historyv1alpha1.Metric {
	var out []historyv1alpha1.Metric
	for _, m := range metrics {
		out = append(out, historyv1alpha1.Metric{Name: m.Name, Value: m.Value})
	}
	return out
}

func seconds(s float64) int64 { return int64(math.Round(s)) }

func metaTime(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	m := metav1.NewTime(*t)
	return &m
}

// ConvertToTable is what kubectl get shows of runs.
func (r *runs) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: "The TrainJob's name and the first eight characters of its UID."},
		{Name: "State", Type: "string", Description: "The TrainJob's last state."},
		{Name: "Reason", Type: "string", Description: "Why it finished.", Priority: 1},
		{Name: "Runtime", Type: "string", Description: "The runtime it was built from."},
		{Name: "Creator", Type: "string", Description: "Who created the TrainJob."},
		{Name: "Nodes", Type: "integer", Description: "Training nodes."},
		{Name: "GPUs", Type: "integer", Description: "GPUs per node.", Priority: 1},
		{Name: "GPU-Hours", Type: "string", Description: "Running time times nodes times GPUs per node."},
		{Name: "Duration", Type: "string", Description: "How long every pod of its training was ready."},
		{Name: "Age", Type: "string", Description: "Since the TrainJob was created."},
	}}
	var items []historyv1alpha1.TrainJobRun
	switch o := obj.(type) {
	case *historyv1alpha1.TrainJobRun:
		items = []historyv1alpha1.TrainJobRun{*o}
	case *historyv1alpha1.TrainJobRunList:
		items = o.Items
		table.Continue = o.Continue
	default:
		return nil, fmt.Errorf("a table of %T", obj)
	}
	now := r.now()
	for i := range items {
		run := &items[i]
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells: []any{
				run.Name, run.Status.State, run.Status.Reason, run.Spec.Runtime.Name, run.Spec.Creator, int64(run.Spec.Nodes),
				run.Spec.GPUsPerNode, fmt.Sprintf("%.1f", float64(run.Status.GPUSeconds)/3600),
				duration.HumanDuration(time.Duration(run.Status.RunningSeconds) * time.Second),
				duration.HumanDuration(now.Sub(run.CreationTimestamp.Time)),
			},
			Object: runtime.RawExtension{Object: run},
		})
	}
	return table, nil
}
