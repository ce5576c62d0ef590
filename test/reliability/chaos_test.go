package reliability

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework/mpi"
	"github.com/trainjob/operator/internal/progress"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// startManager runs the manager as its own program, as user (its writes are told apart by it),
// without webhooks unless env says ENABLE_WEBHOOKS=true, with env and args added.
func startManager(t *testing.T, user string, env []string, args ...string) *testenv.Program {
	t.Helper()
	kubeconfig, err := cluster.Kubeconfig(user)
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

// TestCrashAnywhereLosesAndDuplicatesNothing submits TrainJobs of every framework and a gang
// while the manager is killed (SIGKILL) at random moments and started again, and completes some
// JobSets meanwhile. Once a last manager settles: each TrainJob has exactly one JobSet, one MPI
// Secret and hostfile if MPI, one PodGroup if a gang, and nothing else; every child was created
// once and never deleted or replaced, and has its TrainJob as controller owner; every TrainJob is
// Created, or Complete when its JobSet is.
func TestCrashAnywhereLosesAndDuplicatesNothing(t *testing.T) {
	ctx := context.Background()
	ns := utiltesting.NewNamespace(t, k8sClient, "chaos")
	createGangRuntime(t)
	seed := *chaosSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (-chaos-seed), %d TrainJobs (-chaos-trainjobs), %d kills (-chaos-kills)", seed, *chaosTrainJobs, *chaosKills)
	random := rand.New(rand.NewPCG(uint64(seed), 0))

	seen := watchChildren(t, ns)
	jobs := make([]submitted, *chaosTrainJobs)
	for i := range jobs {
		jobs[i] = submitted{name: fmt.Sprintf("tj-%d", i), kind: i % len(kinds), complete: i%7 == 3}
	}

	// Kill the manager at random moments, from before its caches sync to well into its work,
	// while the TrainJobs are submitted over about as long.
	uptimes := make([]time.Duration, *chaosKills)
	var span time.Duration
	for i := range uptimes {
		uptimes[i] = 200*time.Millisecond + time.Duration(random.Int64N(int64(4*time.Second)))
		span += uptimes[i]
	}
	stopCompleting := completeJobSets(ns, jobs)
	defer stopCompleting()
	submittedAll := make(chan error, 1)
	go func() { submittedAll <- submit(ctx, ns, jobs, span) }()

	var (
		jobSetsAtKill []int
		managers      []*testenv.Program
	)
	for _, uptime := range uptimes {
		m := startManager(t, "manager", nil)
		time.Sleep(uptime)
		m.Kill()
		managers = append(managers, m)
		jobSetsAtKill = append(jobSetsAtKill, seen.count("JobSet"))
	}
	require.NoError(t, <-submittedAll)
	t.Logf("JobSets seen at each kill: %v", jobSetsAtKill)

	last := startManager(t, "manager", nil)
	defer last.Stop()
	converged(t, ns, jobs)
	stopCompleting()
	require.NoError(t, last.Exited(), "the last manager")
	seen.check(t, ns, jobs, false)
	for _, m := range append(managers, last) {
		assert.Empty(t, errorLines(t, m), "errors in %s", m.Log())
	}
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
			t.Logf("%s: conditions %v; its JobSet: %v, terminal state %q", name, tj.Status.Conditions, err, js.Status.TerminalState)
		}
	}()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &trainer.TrainJobList{}
		require.NoError(c, k8sClient.List(context.Background(), list, client.InNamespace(ns)))
		require.Len(c, list.Items, len(jobs))
		behind = nil
		for _, tj := range list.Items {
			if !apimeta.IsStatusConditionTrue(tj.Status.Conditions, want[tj.Name]) {
				behind = append(behind, tj.Name)
			}
		}
		sort.Strings(behind)
		assert.Empty(c, behind, "TrainJobs not yet in their state")
	}, timeout, interval)
	t.Logf("every TrainJob in its state %s later", time.Since(start).Round(time.Second))
}

// child is what a watch saw of one object.
type child struct {
	created, deleted, replaced int
	uid                        types.UID
	// data is a Secret's content at its creation.
	data string
}

// children records each child made in a namespace, by kind and name, from watches started
// before the first TrainJob.
type children struct {
	mu     sync.Mutex
	byKind map[string]map[string]*child
	cache  cache.Cache
}

var watched = map[string]client.Object{
	"JobSet":    &jobsetv1alpha2.JobSet{},
	"Secret":    &corev1.Secret{},
	"ConfigMap": &corev1.ConfigMap{},
	"PodGroup":  &schedulerpluginsv1alpha1.PodGroup{},
}

func watchChildren(t *testing.T, ns string) *children {
	t.Helper()
	c, err := cache.New(cluster.Env.Config, cache.Options{Scheme: testenv.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	require.NoError(t, err)
	seen := &children{byKind: map[string]map[string]*child{}, cache: c}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for kind, obj := range watched {
		seen.byKind[kind] = map[string]*child{}
		informer, err := c.GetInformer(ctx, obj)
		require.NoError(t, err)
		_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { seen.created(kind, obj.(client.Object)) },
			UpdateFunc: func(oldObj, newObj any) {
				if oldObj.(client.Object).GetUID() != newObj.(client.Object).GetUID() {
					seen.replace(kind, newObj.(client.Object))
				}
			},
			DeleteFunc: func(obj any) {
				if gone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					seen.deleted(kind, gone.Key[strings.LastIndex(gone.Key, "/")+1:])
					return
				}
				seen.deleted(kind, obj.(client.Object).GetName())
			},
		})
		require.NoError(t, err)
	}
	go func() { _ = c.Start(ctx) }()
	require.True(t, c.WaitForCacheSync(ctx))
	return seen
}

func (s *children) of(kind, name string) *child {
	c, ok := s.byKind[kind][name]
	if !ok {
		c = &child{}
		s.byKind[kind][name] = c
	}
	return c
}

func (s *children) created(kind string, obj client.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.of(kind, obj.GetName())
	c.created++
	c.uid = obj.GetUID()
	if secret, ok := obj.(*corev1.Secret); ok {
		c.data = secretData(secret)
	}
}

func (s *children) replace(kind string, obj client.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.of(kind, obj.GetName()).replaced++
}

func (s *children) deleted(kind, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.of(kind, name).deleted++
}

func (s *children) count(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKind[kind])
}

// secretData is a digest of a Secret's data, keys in order.
func secretData(secret *corev1.Secret) string {
	keys := make([]string, 0, len(secret.Data))
	for k := range secret.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%x;", k, secret.Data[k])
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// check compares what the watches saw, and what is there now, with what each TrainJob must have:
// with progress, the ConfigMap of the progress endpoint's CA as well.
func (s *children) check(t *testing.T, ns string, jobs []submitted, withProgress bool) {
	t.Helper()
	ctx := context.Background()
	// want holds the TrainJob of each child, by kind and name.
	want := map[string]map[string]string{"JobSet": {}, "Secret": {}, "ConfigMap": {}, "PodGroup": {}}
	for _, j := range jobs {
		want["JobSet"][j.name] = j.name
		if kinds[j.kind].mpi {
			want["Secret"][j.name+mpi.SSHAuthSecretSuffix] = j.name
			want["ConfigMap"][j.name+mpi.HostfileConfigMapSuffix] = j.name
		}
		if kinds[j.kind].gang {
			want["PodGroup"][j.name] = j.name
		}
		if withProgress {
			want["ConfigMap"][progress.ConfigMapName(j.name)] = j.name
		}
	}
	tjs := &trainer.TrainJobList{}
	require.NoError(t, k8sClient.List(ctx, tjs, client.InNamespace(ns)))
	uids := map[string]types.UID{}
	for _, tj := range tjs.Items {
		uids[tj.Name] = tj.UID
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	for kind, names := range want {
		seen := s.byKind[kind]
		var extra, missing, twice, deleted, replaced, orphans, changed []string
		for name := range seen {
			if _, ok := names[name]; !ok {
				extra = append(extra, name)
			}
		}
		for name, tj := range names {
			c, ok := seen[name]
			switch {
			case !ok:
				missing = append(missing, name)
				continue
			case c.created > 1:
				twice = append(twice, name)
			case c.deleted > 0:
				deleted = append(deleted, name)
			case c.replaced > 0:
				replaced = append(replaced, name)
			}
			obj := watched[kind].DeepCopyObject().(client.Object)
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
				missing = append(missing, name+" (now)")
				continue
			}
			owner := metav1.GetControllerOf(obj)
			if owner == nil || owner.Kind != "TrainJob" || owner.UID != uids[tj] {
				orphans = append(orphans, name)
			}
			if obj.GetUID() != c.uid {
				replaced = append(replaced, name+" (now)")
			}
			if secret, ok := obj.(*corev1.Secret); ok && secretData(secret) != c.data {
				changed = append(changed, name)
			}
		}
		t.Logf("%s: %d seen, %d wanted", kind, len(seen), len(names))
		for what, list := range map[string][]string{
			"not the children of any TrainJob": extra, "missing": missing, "created twice": twice,
			"deleted": deleted, "replaced": replaced, "without their TrainJob as controller owner": orphans,
			"whose keys changed": changed,
		} {
			sort.Strings(list)
			assert.Emptyf(t, list, "%ss %s", kind, what)
		}
	}
}
