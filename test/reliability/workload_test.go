package reliability

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// startManager runs the manager as its own program, as user (its writes are told apart by it)
// acting as the installed operator, with its RBAC (testenv.OperatorKubeconfig),
// without webhooks unless env says ENABLE_WEBHOOKS=true, with env and args added.
func startManager(t *testing.T, user string, env []string, args ...string) *testenv.Program {
	t.Helper()
	kubeconfig, err := cluster.OperatorKubeconfig(context.Background(), user)
	require.NoError(t, err)
	p, err := cluster.StartProgram(managerPath, append([]string{"KUBECONFIG=" + kubeconfig, "ENABLE_WEBHOOKS=false"}, env...),
		append([]string{"--metrics-bind-address=0", "--health-probe-bind-address=0"}, args...)...)
	require.NoError(t, err)
	return p
}

// errorLines returns the lines of a program's log that log an error.
func errorLines(t *testing.T, p *testenv.Program) []string {
	t.Helper()
	data, err := os.ReadFile(p.Log())
	require.NoError(t, err)
	var errs []string
	for line := range strings.Lines(string(data)) {
		if strings.Contains(line, `"level":"error"`) {
			errs = append(errs, line)
		}
	}
	return errs
}

// kinds are what the chaos test submits: each shipped runtime, and a coscheduling gang.
var kinds = []struct {
	name, runtime string
	mpi, gang     bool
}{
	{name: "torch", runtime: "torch-distributed"},
	{name: "mpi", runtime: "mpi-distributed", mpi: true},
	{name: "xgboost", runtime: "xgboost-distributed"},
	{name: "jax", runtime: "jax-distributed"},
	{name: "gang", runtime: "torch-distributed-coscheduling", gang: true},
}

// submitted is a TrainJob of the chaos test: its kind, and whether the test completes its
// JobSet (as JobSet's controller would), so that its TrainJob must end Complete.
type submitted struct {
	name     string
	kind     int
	complete bool
}

// mix is n TrainJobs named tj-<i>, of each kind in turn; with complete, every seventh is to be
// completed.
func mix(n int, complete bool) []submitted {
	jobs := make([]submitted, n)
	for i := range jobs {
		jobs[i] = submitted{name: fmt.Sprintf("tj-%d", i), kind: i % len(kinds), complete: complete && i%7 == 3}
	}
	return jobs
}

// lastLines is the end of a log.
func lastLines(log string, n int) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// createGangRuntime makes a coscheduling copy of the shipped torch runtime.
func createGangRuntime(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	torch := &trainer.ClusterTrainingRuntime{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: "torch-distributed"}, torch))
	gang := &trainer.ClusterTrainingRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: "torch-distributed-coscheduling"},
		Spec:       *torch.Spec.DeepCopy(),
	}
	gang.Spec.PodGroupPolicy = &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{
		Coscheduling: &trainer.CoschedulingPodGroupPolicySource{ScheduleTimeoutSeconds: ptr.To[int32](120)},
	}}
	if err := k8sClient.Create(ctx, gang); err != nil {
		require.NoError(t, client.IgnoreAlreadyExists(err))
	}
}

// submit creates the TrainJobs evenly over span, from 8 clients. A create that fails is tried
// again for up to a minute, as a client would while the API server is away; one that turns out
// to have been made before is done.
func submit(ctx context.Context, ns string, jobs []submitted, span time.Duration) error {
	next := make(chan submitted)
	errs := make(chan error, len(jobs))
	var clients sync.WaitGroup
	for range 8 {
		clients.Go(func() {
			for s := range next {
				tj := utiltesting.MakeTrainJob(s.name, ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, kinds[s.kind].runtime).Obj()
				tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](2)}
				deadline := time.Now().Add(time.Minute)
				for {
					err := k8sClient.Create(ctx, tj.DeepCopy())
					if err == nil || apierrors.IsAlreadyExists(err) {
						break
					}
					if time.Now().After(deadline) {
						errs <- fmt.Errorf("creating TrainJob %s: %w", s.name, err)
						break
					}
					time.Sleep(250 * time.Millisecond)
				}
			}
		})
	}
	every := span / time.Duration(len(jobs))
	for _, s := range jobs {
		next <- s
		time.Sleep(every)
	}
	close(next)
	clients.Wait()
	close(errs)
	return <-errs
}

// completeJobSets completes, as JobSet's controller would, the JobSet of each TrainJob to
// complete as soon as it exists, until the returned func is called.
func completeJobSets(ns string, jobs []submitted) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for _, s := range jobs {
				if !s.complete {
					continue
				}
				// A JobSet not completed now (the API server away) is in the next round; converged
				// tells of one never completed.
				_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
					js := &jobsetv1alpha2.JobSet{}
					if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.name}, js); err != nil {
						return client.IgnoreNotFound(err)
					}
					if js.Status.TerminalState != "" {
						return nil
					}
					js.Status.TerminalState = string(jobsetv1alpha2.JobSetCompleted)
					apimeta.SetStatusCondition(&js.Status.Conditions, metav1.Condition{
						Type: string(jobsetv1alpha2.JobSetCompleted), Status: metav1.ConditionTrue,
						Reason: "AllJobsCompleted", Message: "jobset completed successfully",
					})
					return k8sClient.Status().Update(ctx, js)
				})
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// converged waits until every TrainJob is Created, or Complete when its JobSet completed.
func converged(t *testing.T, ns string, jobs []submitted) {
	t.Helper()
	convergedWithin(t, ns, jobs, timeout)
}

// convergedWithin is converged, waiting up to within.
func convergedWithin(t *testing.T, ns string, jobs []submitted, within time.Duration) {
	t.Helper()
	want := map[string]string{}
	for _, s := range jobs {
		want[s.name] = trainer.TrainJobCreated
		if s.complete {
			want[s.name] = trainer.TrainJobComplete
		}
	}
	start := time.Now()
	var behind []string
	defer func() {
		if !t.Failed() {
			return
		}
		for _, name := range behind[:min(5, len(behind))] {
			tj, js := &trainer.TrainJob{}, &jobsetv1alpha2.JobSet{}
			_ = k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, tj)
			err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, js)
			t.Logf("%s: state %q, conditions %v; its JobSet: %v, terminal state %q", name, tj.Status.State, tj.Status.Conditions, err, js.Status.TerminalState)
		}
	}()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &trainer.TrainJobList{}
		require.NoError(c, k8sClient.List(context.Background(), list, client.InNamespace(ns)))
		require.Len(c, list.Items, len(jobs))
		behind = nil
		for _, tj := range list.Items {
			if tj.Status.State != want[tj.Name] {
				behind = append(behind, tj.Name)
			}
		}
		sort.Strings(behind)
		assert.Empty(c, behind, "TrainJobs not yet in their state")
	}, within, interval)
	t.Logf("every TrainJob in its state %s later", time.Since(start).Round(time.Second))
}
