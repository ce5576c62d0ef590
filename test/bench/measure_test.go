package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/pipeline"
	"github.com/trainjob/operator/internal/trainingruntime"
	"github.com/trainjob/operator/test/testenv"
)

// workload is what the TrainJobs of a run are: 2-node TrainJobs of a shipped runtime, gang
// scheduled with coscheduling or not.
type workload struct {
	name         string
	runtime      string
	coscheduling bool
}

var workloads = map[string]workload{
	"torch": {name: "torch", runtime: "torch-distributed"},
	"mpi":   {name: "mpi", runtime: "mpi-distributed"},
	"gang":  {name: "gang", runtime: "torch-distributed", coscheduling: true},
}

// writer is who writes what a TrainJob runs as.
type writer int

const (
	floorWriter writer = iota
	operatorWriter
)

// result is what one measured run saw.
type result struct {
	n int
	// elapsed is from the first TrainJob's create to the last of the N JobSets and Created
	// conditions seen.
	elapsed time.Duration
	// latencies are each TrainJob's time from its create to its JobSet, sorted.
	latencies []time.Duration
	// requests and conflicts count the API server's requests during the run, by verb, resource
	// and code; conflicts are those answered 409.
	requests, conflicts requests
	apiCPU, etcdCPU     time.Duration
	// webhooks is how long the API server's calls of the operator's webhooks took.
	webhooks       histogram
	managerCPU     time.Duration
	managerPeakRSS uint64
	// restartWrites count the restarted manager's writes by verb, resource and code (-restart).
	restartWrites requests
}

func (r *result) throughput() float64 { return float64(r.n) / r.elapsed.Seconds() }

func (r *result) perTrainJob(rs requests) float64 { return rs.total() / float64(r.n) }

func (r *result) apiCPUPerTrainJob() float64 { return ms(r.apiCPU) / float64(r.n) }

// p is the q-th percentile of the latencies.
func (r *result) p(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[min(len(r.latencies)-1, int(float64(len(r.latencies))*q/100))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// startCluster starts a fresh API server for one measured run; fail ends the run with an error
// and where the cluster's logs are.
func startCluster(b *testing.B, opts ...testenv.Option) (cluster *testenv.Cluster, fail func(error)) {
	b.Helper()
	cluster, err := testenv.Start(opts...)
	if err != nil {
		b.Fatal(err)
	}
	return cluster, func(err error) {
		b.Helper()
		b.Fatalf("%v (the logs are in %s)", err, cluster.LogDir())
	}
}

// bed is an API server prepared for measured runs: the shipped runtimes, the workload's runtime,
// the namespace "bench", and the control plane's processes.
type bed struct {
	cluster *testenv.Cluster
	fail    func(error)
	cp      *controlPlane
	rt      *trainingruntime.Runtime
}

// newBed starts a fresh API server for a workload's runs; the caller stops its cluster.
func newBed(b *testing.B, w workload, opts ...testenv.Option) *bed {
	ctx := context.Background()
	cluster, fail := startCluster(b, append([]testenv.Option{testenv.WithoutJobSetWebhooks}, opts...)...)
	bd := &bed{cluster: cluster, fail: fail}
	if err := cluster.Install(ctx, "config/runtimes"); err != nil {
		fail(err)
	}
	var err error
	if bd.rt, err = runtimeOf(ctx, cluster.Client, w); err != nil {
		fail(err)
	}
	if err := cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
		fail(err)
	}
	if bd.cp, err = findControlPlane(cluster); err != nil {
		fail(err)
	}
	return bd
}

// measure runs N TrainJobs of a workload through a fresh API server with one writer.
func measure(b *testing.B, w workload, wr writer) *result {
	bd := newBed(b, w)
	defer bd.cluster.Stop()
	var mgr *manager
	if wr == operatorWriter {
		var err error
		if mgr, err = startManager(bd.cluster); err != nil {
			bd.fail(err)
		}
	}
	res := bd.run(b, w, wr, "tj-", mgr, loadOptions{})
	if mgr != nil && *restart {
		var err error
		if res.restartWrites, err = restartManager(context.Background(), bd.cluster, bd.cp, mgr, w); err != nil {
			bd.fail(err)
		}
	}
	return res
}

// measureWithHistory runs N TrainJobs of a workload through a fresh API server with the operator
// and, beside it, the history (bin/history, as config/history runs it, with its RBAC and its API
// aggregated) recording every TrainJob into SQLite.
func measureWithHistory(b *testing.B, w workload) *result {
	bd := newBed(b, w, testenv.WithAggregation)
	defer bd.cluster.Stop()
	mgr, err := startManager(bd.cluster)
	if err != nil {
		bd.fail(err)
	}
	assets, err := testenv.AssetsDir()
	if err != nil {
		bd.fail(err)
	}
	if err := bd.cluster.StartHistory(context.Background(), filepath.Join(assets, "history"), filepath.Join(b.TempDir(), "history.db")); err != nil {
		bd.fail(err)
	}
	return bd.run(b, w, operatorWriter, "tj-", mgr, loadOptions{})
}

// run creates N TrainJobs of the workload named prefix and a number, at -rate, and measures until
// one writer, the floor's or the running manager mgr, has made their JobSets.
func (bd *bed) run(b *testing.B, w workload, wr writer, prefix string, mgr *manager, opts loadOptions) *result {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	fail := bd.fail
	obs, err := watch(ctx, bd.cluster.Env.Config, prefix, *count)
	if err != nil {
		fail(err)
	}
	before, err := bd.cp.sample(ctx)
	if err != nil {
		fail(err)
	}
	var managerCPUBefore time.Duration
	if mgr != nil {
		if managerCPUBefore, err = mgr.cpuTime(); err != nil {
			fail(err)
		}
	}

	profiled := make(chan error, 2)
	if mgr != nil && *managerProfile != "" {
		go func() { profiled <- mgr.profile(*managerProfile+"."+w.name, 15) }()
	} else {
		profiled <- nil
	}
	if *apiProfile != "" {
		side := "floor"
		if wr == operatorWriter {
			side = "operator"
		}
		go func() { profiled <- bd.cp.profile(ctx, fmt.Sprintf("%s.%s.%s", *apiProfile, w.name, side), 15) }()
	} else {
		profiled <- nil
	}
	start := time.Now()
	opts.rate = *rate
	if err := load(ctx, bd.cluster.Client, bd.rt, wr, obs, *count, opts); err != nil {
		fail(err)
	}
	if err := obs.wait(10 * time.Minute); err != nil {
		fail(err)
	}
	end := obs.last()
	for range 2 {
		if err := <-profiled; err != nil {
			fail(err)
		}
	}
	if mgr != nil && *managerHeap != "" {
		if err := mgr.heap(*managerHeap + "." + w.name); err != nil {
			fail(err)
		}
	}
	after, err := bd.cp.sample(ctx)
	if err != nil {
		fail(err)
	}

	requested := after.requestsSince(before)
	res := &result{
		n:         *count,
		elapsed:   end.Sub(start),
		latencies: obs.latencies(),
		requests:  requested,
		conflicts: requested.where(func(k requestKey) bool { return k.code == "409" }),
		apiCPU:    after.apiCPU - before.apiCPU,
		etcdCPU:   after.etcdCPU - before.etcdCPU,
		webhooks:  after.webhooks.since(before.webhooks),
	}
	if mgr != nil {
		if res.managerPeakRSS, err = mgr.peakRSS(); err != nil {
			fail(err)
		}
		managerCPU, err := mgr.cpuTime()
		if err != nil {
			fail(err)
		}
		res.managerCPU = managerCPU - managerCPUBefore
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(res.throughput(), "jobsets/s")
	b.ReportMetric(ms(res.p(50)), "p50-ms")
	b.ReportMetric(ms(res.p(99)), "p99-ms")
	b.ReportMetric(res.perTrainJob(res.requests), "requests/tj")
	b.ReportMetric(res.perTrainJob(res.conflicts), "409s/tj")
	b.ReportMetric(res.apiCPUPerTrainJob(), "apiserver-cpu-ms/tj")
	if mgr != nil {
		b.ReportMetric(float64(res.managerPeakRSS)/(1<<20), "manager-peak-MiB")
		b.ReportMetric(ms(res.managerCPU)/float64(res.n), "manager-cpu-ms/tj")
	}
	return res
}

// runtimeOf reads the shipped runtime of the workload, and makes a coscheduling copy of it when
// the workload is a gang.
func runtimeOf(ctx context.Context, c client.Client, w workload) (*trainingruntime.Runtime, error) {
	rt := &trainer.ClusterTrainingRuntime{}
	if err := c.Get(ctx, client.ObjectKey{Name: w.runtime}, rt); err != nil {
		return nil, err
	}
	if w.coscheduling {
		rt = &trainer.ClusterTrainingRuntime{
			ObjectMeta: metav1.ObjectMeta{Name: w.runtime + "-coscheduling", Labels: rt.Labels},
			Spec:       *rt.Spec.DeepCopy(),
		}
		rt.Spec.PodGroupPolicy = &trainer.PodGroupPolicy{PodGroupPolicySource: trainer.PodGroupPolicySource{
			Coscheduling: &trainer.CoschedulingPodGroupPolicySource{ScheduleTimeoutSeconds: ptr.To[int32](120)},
		}}
		if err := c.Create(ctx, rt); err != nil {
			return nil, err
		}
	}
	return &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: rt.Name, Spec: &rt.Spec}, nil
}

// loadOptions shape the TrainJobs load creates.
type loadOptions struct {
	// clients create them at once; 0 is -clients.
	clients int
	// shape changes the i-th TrainJob before it is created.
	shape func(i int, tj *trainer.TrainJob)
	// rate is how many are created per second, steadily; 0 creates them as fast as they can.
	rate float64
}

// load creates n TrainJobs in the namespace "bench", named the observer's prefix and a number,
// from the clients at once, as fast as they can or at a steady rate. With the floor's writer, as many
// writers as the operator has workers write, for each TrainJob created, what the operator would:
// the floor has the operator's concurrency, not the clients'.
func load(ctx context.Context, c client.Client, rt *trainingruntime.Runtime, wr writer, obs *observer, n int, opts loadOptions) error {
	fw := framework.Select(controller.Frameworks(""), rt.Spec.MLPolicy)
	var (
		creators, writers sync.WaitGroup
		errOnce           sync.Once
		first             error
		next              = make(chan int)
		created           = make(chan *trainer.TrainJob, n)
	)
	fail := func(tj *trainer.TrainJob, err error) {
		errOnce.Do(func() { first = fmt.Errorf("TrainJob %s: %w", tj.Name, err) })
	}
	if opts.clients == 0 {
		opts.clients = *clients
	}
	for range opts.clients {
		creators.Go(func() {
			for i := range next {
				tj := &trainer.TrainJob{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%d", obs.prefix, i), Namespace: "bench"},
					Spec: trainer.TrainJobSpec{
						RuntimeRef: trainer.RuntimeRef{Name: rt.Name, Kind: ptr.To(rt.Kind)},
						Trainer:    &trainer.Trainer{NumNodes: ptr.To[int32](2)},
					},
				}
				if opts.shape != nil {
					opts.shape(i, tj)
				}
				obs.sent(tj.Name)
				if err := c.Create(ctx, tj); err != nil {
					fail(tj, err)
				} else if wr == floorWriter {
					created <- tj
				}
			}
		})
	}
	for range controller.DefaultMaxConcurrentReconciles {
		writers.Go(func() {
			for tj := range created {
				if err := writeAsTheOperator(ctx, c, tj, rt, fw); err != nil {
					fail(tj, err)
				}
			}
		})
	}
	var tick <-chan time.Time
	if opts.rate > 0 {
		ticker := time.NewTicker(time.Duration(float64(time.Second) / opts.rate))
		defer ticker.Stop()
		tick = ticker.C
	}
	for i := range n {
		if tick != nil {
			<-tick
		}
		next <- i
	}
	close(next)
	creators.Wait()
	close(created)
	writers.Wait()
	return first
}

// writeAsTheOperator is the floor's writer: the writes the operator makes for a new TrainJob,
// and nothing else. It builds them with the operator's own pipeline, from the runtime read once.
// The runtime's snapshot is kept first, as the operator must (KEP-2599), and recorded in the one
// status write after the JobSet. The event is part of what the user sees (`kubectl describe
// trainjob`), so it is part of the floor.
func writeAsTheOperator(ctx context.Context, c client.Client, tj *trainer.TrainJob, rt *trainingruntime.Runtime, fw framework.Framework) error {
	cm, snapshot, err := trainingruntime.Snapshot(tj, rt, map[string]string{trainer.TrainJobNameLabel: tj.Name}, framework.OwnerReference(tj))
	if err != nil {
		return err
	}
	if err := c.Create(ctx, cm); err != nil {
		return err
	}
	children, err := pipeline.Build(tj, rt, fw)
	if err != nil {
		return err
	}
	owner := client.FieldOwner("bench")
	for _, obj := range children.Create {
		if err := c.Create(ctx, obj); err != nil {
			return err
		}
	}
	// The PodGroup and the JobSet are created, as the operator does: a create costs the API
	// server less than an apply.
	for _, ac := range []any{children.PodGroup, children.JobSet} {
		if ac == nil {
			continue
		}
		data, err := json.Marshal(ac)
		if err != nil {
			return err
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(data); err != nil {
			return err
		}
		if err := c.Create(ctx, obj, owner); err != nil {
			return err
		}
	}
	// The status the operator writes with upstream's conditions, its default: no condition.
	message := fmt.Sprintf("JobSet %q is created", tj.Name)
	tj.Status.RuntimeSnapshot = snapshot
	tj.Status.State, tj.Status.ObservedGeneration, tj.Status.StartTime = trainer.TrainJobCreated, tj.Generation, ptr.To(tj.CreationTimestamp)
	if err := c.Status().Update(ctx, tj); err != nil {
		return err
	}
	// The event `kubectl describe` shows for it.
	now := time.Now()
	return c.Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", tj.Name, now.UnixNano()), Namespace: tj.Namespace},
		EventTime:  metav1.NewMicroTime(now), ReportingController: "bench", ReportingInstance: "bench",
		Action: trainer.TrainJobCreated, Reason: trainer.TrainJobJobsCreatedReason, Note: message, Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{
			APIVersion: trainer.GroupVersion.String(), Kind: "TrainJob", Namespace: tj.Namespace, Name: tj.Name, UID: tj.UID,
		},
	})
}

// latencies are the observer's times from create to JobSet, sorted.
func (o *observer) latencies() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ds []time.Duration
	for name, at := range o.jobSets {
		if sent, ok := o.created[name]; ok {
			ds = append(ds, at.Sub(sent))
		}
	}
	slices.Sort(ds)
	return ds
}
