package controller

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

func TestStateSince(t *testing.T) {
	created := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	at := func(minutes int) *metav1.Time {
		return ptr.To(metav1.NewTime(created.Add(time.Duration(minutes) * time.Minute)))
	}
	condAt := func(condType string, status metav1.ConditionStatus, minutes int) metav1.Condition {
		return metav1.Condition{Type: condType, Status: status, Reason: "R", LastTransitionTime: *at(minutes)}
	}
	cases := map[string]struct {
		state      string
		status     trainer.TrainJobStatus
		want       *metav1.Time
		notOrdered bool
	}{
		"Pending: since its creation": {state: trainer.TrainJobPending, want: at(0)},
		"Suspended: since it was suspended": {state: trainer.TrainJobSuspended, want: at(30),
			status: trainer.TrainJobStatus{Conditions: []metav1.Condition{condAt(trainer.TrainJobSuspended, metav1.ConditionTrue, 30)}}},
		"Created: since it started, not since its JobSet was made suspended": {state: trainer.TrainJobCreated, want: at(40),
			status: trainer.TrainJobStatus{StartTime: at(40), Conditions: []metav1.Condition{condAt(trainer.TrainJobCreated, metav1.ConditionTrue, 1)}}},
		"Created: resumed after it ran, since its resume": {state: trainer.TrainJobCreated, want: at(90),
			status: trainer.TrainJobStatus{StartTime: at(90), ReadyTime: at(20)}},
		"Created: stopped running, since its Running condition turned False (--conditions=all)": {state: trainer.TrainJobCreated, want: at(70),
			status: trainer.TrainJobStatus{StartTime: at(5), ReadyTime: at(20), Conditions: []metav1.Condition{condAt(trainer.TrainJobRunning, metav1.ConditionFalse, 70)}}},
		"Created: stopped running under upstream's conditions: unknown, not its start": {state: trainer.TrainJobCreated, notOrdered: true,
			status: trainer.TrainJobStatus{StartTime: at(5), ReadyTime: at(20)}},
		"Running: since its pods were all ready": {state: trainer.TrainJobRunning, want: at(20),
			status: trainer.TrainJobStatus{StartTime: at(5), ReadyTime: at(20)}},
		"Complete: finished, not aged": {state: trainer.TrainJobComplete, notOrdered: true},
		"Failed: finished, not aged":   {state: trainer.TrainJobFailed, notOrdered: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tj := utiltesting.MakeTrainJob("tj", "ns").Obj()
			tj.CreationTimestamp = *at(0)
			tj.Status = tc.status
			got, ok := stateSince(tj, tc.state)
			if tc.notOrdered {
				assert.False(t, ok, "aged since %v", got)
				return
			}
			require.True(t, ok)
			assert.Equal(t, tc.want.Time, got)
		})
	}
}

// scrape collects c as Prometheus would, into "name{label=value,...}" → value.
func scrape(t *testing.T, c prometheus.Collector) map[string]float64 {
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue()
		}
	}
	return got
}

func TestTheCollectorAgesWaitingTrainJobsAndGangs(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	trainJob := func(name string, created time.Duration, status trainer.TrainJobStatus) *trainer.TrainJob {
		tj := utiltesting.MakeTrainJob(name, "ns").Obj()
		tj.UID, tj.CreationTimestamp, tj.Status = types.UID(name), ago(created), status
		return tj
	}
	trainJobs := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	for _, tj := range []*trainer.TrainJob{
		trainJob("pending-long", 2*time.Hour, trainer.TrainJobStatus{State: trainer.TrainJobPending}),
		trainJob("pending-new", 10*time.Minute, trainer.TrainJobStatus{State: trainer.TrainJobPending}),
		trainJob("created", 3*time.Hour, trainer.TrainJobStatus{State: trainer.TrainJobCreated, StartTime: ptr.To(ago(30 * time.Minute))}),
		trainJob("gang-late", 3*time.Hour, trainer.TrainJobStatus{State: trainer.TrainJobCreated, StartTime: ptr.To(ago(10 * time.Minute))}),
		trainJob("gang-patient", 3*time.Hour, trainer.TrainJobStatus{State: trainer.TrainJobCreated, StartTime: ptr.To(ago(20 * time.Minute))}),
		trainJob("gang-queued", 5*time.Hour, trainer.TrainJobStatus{State: trainer.TrainJobSuspended, Conditions: []metav1.Condition{
			{Type: trainer.TrainJobSuspended, Status: metav1.ConditionTrue, Reason: trainer.TrainJobSuspendedReason, LastTransitionTime: ago(45 * time.Minute)}}}),
		trainJob("done", 5*time.Hour, trainer.TrainJobStatus{State: trainer.TrainJobComplete}),
	} {
		require.NoError(t, trainJobs.Add(tj))
	}
	queued, _, _ := trainJobs.GetByKey("ns/gang-queued")
	queued.(*trainer.TrainJob).Spec.Suspend = ptr.To(true)
	// MultiKueue's TrainJob waits in a queue for days, and the operator writes none of its
	// status: it is not the operator's to be stuck.
	elsewhere := trainJob("elsewhere", 48*time.Hour, trainer.TrainJobStatus{})
	elsewhere.Spec.ManagedBy = ptr.To(trainer.MultiKueueControllerName)
	require.NoError(t, trainJobs.Add(elsewhere))

	// A PodGroup made an hour ago, whose scheduler places its gang or not.
	podGroup := func(owner string, phase schedulerpluginsv1alpha1.PodGroupPhase, timeout *int32) *schedulerpluginsv1alpha1.PodGroup {
		pg := &schedulerpluginsv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: owner, Namespace: "ns", CreationTimestamp: ago(time.Hour),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: trainer.GroupVersion.String(), Kind: trainer.TrainJobKind,
				Name: owner, UID: types.UID(owner), Controller: ptr.To(true)}}}}
		pg.Spec.ScheduleTimeoutSeconds, pg.Status.Phase = timeout, phase
		return pg
	}
	coscheduling := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	for _, pg := range []*schedulerpluginsv1alpha1.PodGroup{
		podGroup("gang-late", schedulerpluginsv1alpha1.PodGroupScheduling, nil),                    // waits 10m, past its 60s
		podGroup("gang-patient", schedulerpluginsv1alpha1.PodGroupScheduling, ptr.To[int32](3600)), // waits 20m of its hour
		podGroup("gang-queued", schedulerpluginsv1alpha1.PodGroupPending, nil),                     // suspended: nothing waits
		podGroup("created", schedulerpluginsv1alpha1.PodGroupRunning, nil),                         // placed
	} {
		require.NoError(t, coscheduling.Add(pg))
	}
	// Volcano's gangs wait in phase Pending or Inqueue: one whose TrainJob is not cached, made 5
	// minutes ago, and the suspended TrainJob's, which does not wait for the scheduler.
	volcano := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	require.NoError(t, volcano.Add(&volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "v", Namespace: "ns", CreationTimestamp: ago(5 * time.Minute)},
		Status: volcanov1beta1.PodGroupStatus{Phase: volcanov1beta1.PodGroupInqueue}}))
	queuedGang := podGroup("gang-queued", "", nil)
	require.NoError(t, volcano.Add(&volcanov1beta1.PodGroup{ObjectMeta: queuedGang.ObjectMeta,
		Status: volcanov1beta1.PodGroupStatus{Phase: volcanov1beta1.PodGroupPending}}))

	scheme := runtime.NewScheme()
	require.NoError(t, trainer.AddToScheme(scheme))
	leading := true
	c := &trainJobsCollector{trainJobs: trainJobs, podGroups: []toolscache.Store{coscheduling, volcano},
		reader: fake.NewClientBuilder().WithScheme(scheme).Build(), leading: func() bool { return leading }}

	got := scrape(t, c)
	// Their runtime cannot be read: framework "none".
	want := map[string]float64{
		"trainjob_oldest_in_state_seconds{framework=none,state=Pending}":   (2 * time.Hour).Seconds(),
		"trainjob_oldest_in_state_seconds{framework=none,state=Created}":   (30 * time.Minute).Seconds(),
		"trainjob_oldest_in_state_seconds{framework=none,state=Suspended}": (45 * time.Minute).Seconds(),
		"trainjob_gangs_past_timeout{scheduler=coscheduling}":              1,
		"trainjob_gang_oldest_wait_seconds{scheduler=coscheduling}":        (20 * time.Minute).Seconds(),
		"trainjob_gang_oldest_wait_seconds{scheduler=volcano}":             (5 * time.Minute).Seconds(),
		"trainjob_trainjobs{framework=none,state=Pending}":                 3, // MultiKueue's among them

		"trainjob_trainjobs{framework=none,state=Created}":                                3,
		"trainjob_trainjobs{framework=none,state=Suspended}":                              1,
		"trainjob_trainjobs{framework=none,state=Complete}":                               1,
		"trainjob_runtime_trainjobs{kind=ClusterTrainingRuntime,name=runtime,namespace=}": 8,
	}
	var names []string
	for name := range got {
		names = append(names, name)
	}
	sort.Strings(names)
	for name, v := range want {
		delta := 0.0
		if strings.Contains(name, "_seconds{") {
			delta = 5 // Ages grow while the test runs.
		}
		assert.InDelta(t, v, got[name], delta, "%s; scraped:\n%s", name, strings.Join(names, "\n"))
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected series %s = %v", name, got[name])
		}
	}
	assert.NotContains(t, got, "trainjob_gangs_past_timeout{scheduler=volcano}", "volcano has no schedule timeout")

	leading = false
	assert.Empty(t, scrape(t, c), "a replica that does not lead reports none")
}

// documentedMetricRow is a row of a table of docs/metrics.md: | `name` | type | ... (as
// hack/tools/monitoring reads them, to check the dashboard's and the alerts' queries).
var documentedMetricRow = regexp.MustCompile("(?m)^\\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \\| (counter|gauge|histogram|summary) \\|")

// TestDocumentedMetricsAreExported: every metric docs/metrics.md's tables list, which the
// dashboard and the alerts may read (make test-monitoring checks that they read no other), is
// one the manager registers: a collector of the same name and another help is refused. The
// history's, in their own section, are the history's (internal/history checks them).
func TestDocumentedMetricsAreExported(t *testing.T) {
	data, err := os.ReadFile("../../docs/metrics.md")
	require.NoError(t, err)
	manager, _, found := strings.Cut(string(data), "\n## The history's metrics\n")
	require.True(t, found, "docs/metrics.md has no section of the history's metrics")
	rows := documentedMetricRow.FindAllStringSubmatch(manager, -1)
	require.NotEmpty(t, rows)
	for _, row := range rows {
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: row[1], Help: fmt.Sprintf("probe of %s", t.Name())})
		if err := metrics.Registry.Register(probe); err == nil {
			metrics.Registry.Unregister(probe)
			t.Errorf("docs/metrics.md lists %s, which the manager does not export", row[1])
		}
	}
}
