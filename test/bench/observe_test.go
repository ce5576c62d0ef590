package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/procfs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	"github.com/trainjob/operator/test/testenv"
)

// observer watches the run's JobSets and TrainJobs, and notes when each TrainJob was sent, when
// its JobSet appeared, and when it became Created and Complete. It watches JobSets whole, as
// JobSet's controller does in a cluster: the API server encodes each JobSet event once for all
// the watchers that read it the same way, so the floor pays for that encoding as a real
// cluster does, and the operator's watch of JobSets shares it, as it does in a real cluster.
type observer struct {
	// prefix begins the names of the TrainJobs observed, and of their JobSets.
	prefix   string
	n        int
	mu       sync.Mutex
	created  map[string]time.Time
	jobSets  map[string]time.Time
	ready    map[string]time.Time
	complete map[string]bool
	// finished are the TrainJobs seen Complete or Failed.
	finished map[string]bool
	changed  chan struct{}
}

// watch starts an observer of n TrainJobs whose names begin with prefix, until ctx ends.
func watch(ctx context.Context, cfg *rest.Config, prefix string, n int) (*observer, error) {
	o := &observer{
		prefix: prefix, n: n, created: map[string]time.Time{}, jobSets: map[string]time.Time{},
		ready: map[string]time.Time{}, complete: map[string]bool{}, finished: map[string]bool{},
		changed: make(chan struct{}, 1),
	}
	c, err := cache.New(cfg, cache.Options{Scheme: testenv.Scheme})
	if err != nil {
		return nil, err
	}
	inf, err := c.GetInformer(ctx, &jobsetv1alpha2.JobSet{})
	if err != nil {
		return nil, err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if name := obj.(client.Object).GetName(); strings.HasPrefix(name, prefix) {
			o.note(o.jobSets, name)
		}
	}}); err != nil {
		return nil, err
	}
	if inf, err = c.GetInformer(ctx, &trainer.TrainJob{}); err != nil {
		return nil, err
	}
	seen := func(obj any) {
		tj := obj.(*trainer.TrainJob)
		if !strings.HasPrefix(tj.Name, prefix) {
			return
		}
		if tj.Status.ObservedGeneration > 0 { // Its JobSet is made.
			o.note(o.ready, tj.Name)
		}
		if c := tj.FinishedCondition(); c != nil {
			o.mu.Lock()
			o.finished[tj.Name] = true
			if c.Type == trainer.TrainJobComplete {
				o.complete[tj.Name] = true
			}
			o.mu.Unlock()
			o.signal()
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) },
	}); err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, errors.New("the observer's cache did not sync")
	}
	return o, nil
}

// sent notes that the TrainJob is about to be created.
func (o *observer) sent(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.created[name] = time.Now()
}

// note notes the first time something of the TrainJob was seen.
func (o *observer) note(m map[string]time.Time, name string) {
	o.mu.Lock()
	if _, ok := m[name]; !ok {
		m[name] = time.Now()
	}
	o.mu.Unlock()
	o.signal()
}

func (o *observer) signal() {
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

// waitUntil waits until done is true of the observer, or the timeout passes.
func (o *observer) waitUntil(timeout time.Duration, what string, done func(*observer) bool) error {
	deadline := time.After(timeout)
	for {
		o.mu.Lock()
		ok := done(o)
		status := fmt.Sprintf("%d JobSets, %d Created, %d Complete of %d TrainJobs", len(o.jobSets), len(o.ready), len(o.complete), o.n)
		o.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-o.changed:
		case <-time.After(time.Second):
		case <-deadline:
			return fmt.Errorf("timed out after %s waiting for %s: %s", timeout, what, status)
		}
	}
}

// wait waits until every TrainJob has its JobSet and is Created.
func (o *observer) wait(timeout time.Duration) error {
	return o.waitUntil(timeout, "every JobSet and Created condition", func(o *observer) bool {
		return len(o.jobSets) == o.n && len(o.ready) == o.n
	})
}

// last is when the last JobSet or Created condition was seen.
func (o *observer) last() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	var last time.Time
	for _, m := range []map[string]time.Time{o.jobSets, o.ready} {
		for _, t := range m {
			if t.After(last) {
				last = t
			}
		}
	}
	return last
}

// controlPlane is the run's kube-apiserver and etcd processes, and a client for the API server's
// metrics.
type controlPlane struct {
	apiServer, etcd procfs.Proc
	metrics         rest.Interface
}

// findControlPlane finds the cluster's kube-apiserver and etcd processes.
func findControlPlane(cluster *testenv.Cluster) (*controlPlane, error) {
	cs, err := kubernetes.NewForConfig(cluster.Env.Config)
	if err != nil {
		return nil, err
	}
	cp := &controlPlane{metrics: cs.Discovery().RESTClient()}
	cp.apiServer, cp.etcd, err = cluster.ControlPlaneProcesses()
	return cp, err
}

// profile writes a CPU profile of the API server over the next seconds to path (its
// --profiling, on by default, read with the administrator's credentials).
func (cp *controlPlane) profile(ctx context.Context, path string, seconds int) error {
	data, err := cp.metrics.Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).
		Timeout(time.Duration(seconds+30) * time.Second).DoRaw(ctx)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// sample is the control plane's counters at a moment.
type sample struct {
	apiCPU, etcdCPU time.Duration
	requests        requests
	// webhooks is how long the API server's calls of the operator's webhooks took, each call's
	// round trip (apiserver_admission_webhook_admission_duration_seconds).
	webhooks histogram
}

// operatorWebhook tells whether a webhook of a configuration is one of the operator's.
func operatorWebhook(labels map[string]string) bool {
	return strings.HasSuffix(labels["name"], "."+trainer.GroupVersion.Group)
}

// requestKey is a kind of API request, as apiserver_request_total counts them.
type requestKey struct{ verb, resource, code string }

func (k requestKey) String() string { return k.verb + " " + k.resource + " " + k.code }

func (cp *controlPlane) sample(ctx context.Context) (*sample, error) {
	s := &sample{requests: requests{}}
	var err error
	if s.apiCPU, err = cpuTime(cp.apiServer); err != nil {
		return nil, err
	}
	if s.etcdCPU, err = cpuTime(cp.etcd); err != nil {
		return nil, err
	}
	data, err := cp.metrics.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	families, err := testenv.ParseMetrics(data)
	if err != nil {
		return nil, err
	}
	s.webhooks = histogramOf(families, "apiserver_admission_webhook_admission_duration_seconds", operatorWebhook)
	if f, ok := families["apiserver_request_total"]; ok {
		for _, m := range f.Metric {
			l := labelsOf(m)
			if l["resource"] == "" {
				continue // The metrics themselves, and other paths that are not objects.
			}
			resource := l["resource"]
			if l["subresource"] != "" {
				resource += "/" + l["subresource"]
			}
			s.requests[requestKey{l["verb"], resource, l["code"]}] += m.GetCounter().GetValue()
		}
	}
	return s, nil
}

// labelsOf is a metric's labels, by name.
func labelsOf(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// histogram is a Prometheus histogram's cumulative counts by upper bound (the last +Inf: every
// observation), summed over the series a filter keeps.
type histogram map[float64]float64

func histogramOf(families testenv.Metrics, name string, keep func(labels map[string]string) bool) histogram {
	h := histogram{}
	for _, m := range families[name].GetMetric() {
		if !keep(labelsOf(m)) {
			continue
		}
		for _, b := range m.GetHistogram().GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) { // The text format's +Inf bucket is the count.
				h[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
		h[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
	}
	return h
}

// since is what was observed between an earlier histogram and this one.
func (h histogram) since(before histogram) histogram {
	out := histogram{}
	for le, n := range h {
		out[le] = n - before[le]
	}
	return out
}

// count is the number of observations.
func (h histogram) count() float64 { return h[math.Inf(1)] }

// within is the share of the observations at most le (a bucket's bound).
func (h histogram) within(le float64) float64 {
	if h.count() == 0 {
		return 0
	}
	return h[le] / h.count()
}

// bound is the least bucket bound at or under which at least a share q of the observations fell:
// as near as the buckets tell, the q-quantile is at most this. With no observations, NaN.
func (h histogram) bound(q float64) float64 {
	if h.count() == 0 {
		return math.NaN()
	}
	for _, le := range slices.Sorted(maps.Keys(h)) {
		if h[le] >= q*h.count() {
			return le
		}
	}
	return math.Inf(1)
}

// requestsSince counts the requests between an earlier sample and this one.
func (s *sample) requestsSince(before *sample) requests {
	out := requests{}
	for k, v := range s.requests {
		if d := v - before.requests[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// requests count API requests by kind.
type requests map[requestKey]float64

// where keeps the requests whose kind keep takes.
func (r requests) where(keep func(requestKey) bool) requests {
	out := requests{}
	for k, v := range r {
		if keep(k) {
			out[k] = v
		}
	}
	return out
}

// total is the number of requests of every kind.
func (r requests) total() float64 {
	var t float64
	for _, v := range r {
		t += v
	}
	return t
}

// kinds are the kinds of requests counted, in order.
func (r requests) kinds() []requestKey {
	return slices.SortedFunc(maps.Keys(r), func(a, b requestKey) int { return strings.Compare(a.String(), b.String()) })
}

// cpuTime is the user and system CPU time a process has used.
func cpuTime(p procfs.Proc) (time.Duration, error) {
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return time.Duration(st.CPUTime() * float64(time.Second)), nil
}

// limitMemory passes -memory-limit to the managers started while it is set: at size, once the
// population is made.
var limitMemory bool

// manager is bin/manager run as its own program, as cmd/main.go runs it, without webhooks unless
// asked (admit), with its metrics and profiler on loopback over HTTP.
type manager struct {
	program                *testenv.Program
	metricsAddr, pprofAddr string
}

func startManager(cluster *testenv.Cluster) (*manager, error) {
	m, err := launchManager(cluster, nil)
	if err != nil {
		return nil, err
	}
	return m, m.waitForWorkers()
}

// launchManager starts the manager, with args added to its own, without waiting for it; with
// hooks, it serves the operator's webhooks as they say (their certificate, host and port).
func launchManager(cluster *testenv.Cluster, hooks *envtest.WebhookInstallOptions, args ...string) (*manager, error) {
	kubeconfig, err := cluster.OperatorKubeconfig(context.Background(), "manager")
	if err != nil {
		return nil, err
	}
	m := &manager{}
	if m.metricsAddr, err = testenv.FreeAddr(); err != nil {
		return nil, err
	}
	if m.pprofAddr, err = testenv.FreeAddr(); err != nil {
		return nil, err
	}
	env := []string{"KUBECONFIG=" + kubeconfig, "ENABLE_WEBHOOKS=false"}
	if hooks != nil {
		env[1] = "ENABLE_WEBHOOKS=true"
		args = append(args, "--webhook-cert-path="+hooks.LocalServingCertDir, "--webhook-host="+hooks.LocalServingHost,
			"--webhook-port="+strconv.Itoa(hooks.LocalServingPort))
	}
	if *managerEnv != "" {
		env = append(env, strings.Split(*managerEnv, ",")...)
	}
	if limitMemory && *memoryLimit != "" {
		env = append(env, "MEMORY_LIMIT="+*memoryLimit)
	}
	m.program, err = cluster.StartProgram("manager", env, append([]string{
		"--metrics-bind-address=" + m.metricsAddr, "--metrics-secure=false", "--health-probe-bind-address=0",
		"--pprof-bind-address=" + m.pprofAddr}, args...)...)
	return m, err
}

// waitForWorkers waits until every controller of the manager has its cache and started its
// workers, as its log says.
func (m *manager) waitForWorkers() error {
	return m.waitForLog("Starting workers", len(controller.Frameworks(""))+1, // And the gang controller.
		"the manager did not start its controllers")
}

// waitForLog waits, five minutes at most, until the manager's log holds line at least n times;
// failing, it says what did not happen.
func (m *manager) waitForLog(line string, n int, what string) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if err := m.program.Exited(); err != nil {
			return err
		}
		data, err := os.ReadFile(m.program.Log())
		if err != nil {
			return err
		}
		if bytes.Count(data, []byte(line)) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s within 5 minutes; see %s", what, m.program.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// peakRSS is the most memory the manager's process has held.
func (m *manager) peakRSS() (uint64, error) {
	p, err := procfs.NewProc(m.program.Pid())
	if err != nil {
		return 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, err
	}
	return st.VmHWM, nil
}

// profile writes a CPU profile of the manager over the next seconds to path. A manager just
// launched is given a few seconds to serve it.
func (m *manager) profile(path string, seconds int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := m.pprof(path, fmt.Sprintf("profile?seconds=%d", seconds))
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// heap writes a heap profile of the manager, after a garbage collection, to path.
func (m *manager) heap(path string) error { return m.pprof(path, "heap?gc=1") }

// pprof writes the manager's profile of Go's profiler at query (under /debug/pprof/) to path.
func (m *manager) pprof(path, query string) error {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/%s", m.pprofAddr, query))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.ReadFrom(resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// cpuTime is the CPU time the manager's process has used.
func (m *manager) cpuTime() (time.Duration, error) {
	p, err := procfs.NewProc(m.program.Pid())
	if err != nil {
		return 0, err
	}
	return cpuTime(p)
}

// metrics reads the manager's metrics.
func (m *manager) metrics() (testenv.Metrics, error) {
	resp, err := http.Get("http://" + m.metricsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(bufio.NewReader(resp.Body)); err != nil {
		return nil, err
	}
	return testenv.ParseMetrics(buf.Bytes())
}

// webhookServed is how many admission requests the manager's webhook server answered, and the
// seconds it took for them all.
type webhookServed struct{ calls, seconds float64 }

// served reads the manager's metrics: what its webhook server answered so far.
func (m *manager) served() (webhookServed, error) {
	families, err := m.metrics()
	if err != nil {
		return webhookServed{}, err
	}
	var s webhookServed
	for _, h := range families["controller_runtime_webhook_latency_seconds"].GetMetric() {
		s.calls += float64(h.GetHistogram().GetSampleCount())
		s.seconds += h.GetHistogram().GetSampleSum()
	}
	return s, nil
}

// reconciles reads the manager's metrics: the reconciles done, and the TrainJobs queued.
func (m *manager) reconciles() (done, queued float64, err error) {
	families, err := m.metrics()
	if err != nil {
		return 0, 0, err
	}
	for _, m := range families["controller_runtime_reconcile_total"].GetMetric() {
		done += m.GetCounter().GetValue()
	}
	for _, m := range families["workqueue_depth"].GetMetric() {
		queued += m.GetGauge().GetValue()
	}
	return done, queued, nil
}

// settleQuiet is how long the manager's queues stay empty before it counts as settled.
const settleQuiet = 2 * time.Second

// settle waits until the manager has reconciled at least want times and its queues stayed empty
// for settleQuiet.
func (m *manager) settle(want float64) error {
	deadline := time.Now().Add(10 * time.Minute)
	quietSince := time.Time{}
	for time.Now().Before(deadline) {
		done, queued, err := m.reconciles()
		switch {
		case err == nil && done >= want && queued == 0:
			if quietSince.IsZero() {
				quietSince = time.Now()
			}
			if time.Since(quietSince) >= settleQuiet {
				return nil
			}
		default:
			quietSince = time.Time{}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the manager did not settle within 10 minutes; see %s", m.program.Log())
}

// restartManager finishes every other TrainJob's JobSet, waits until the manager has written it
// to their status, restarts the manager, and counts the writes it makes until it settles: none
// are needed, as nothing changed.
func restartManager(ctx context.Context, cluster *testenv.Cluster, cp *controlPlane, m *manager, w workload) (requests, error) {
	obs, err := watch(ctx, cluster.Env.Config, "tj-", *count)
	if err != nil {
		return nil, err
	}
	var every []int
	for i := 0; i < *count; i += 2 {
		every = append(every, i)
	}
	if err := finishJobSets(ctx, cluster.Client, obs, every, func(int) bool { return true }); err != nil {
		return nil, err
	}
	// Every TrainJob is reconciled once at start; a gang's by the gang controller as well.
	want := float64(*count)
	if w.coscheduling {
		want *= 2
	}
	_, r, err := restartAndCount(ctx, cluster, cp, m, want, "")
	if err != nil {
		return nil, err
	}
	return r.writes, nil
}

// finishJobSets marks the JobSets of the observer's TrainJobs numbered in which finished, as
// JobSet's controller would: completed where completed says so, failed otherwise. It waits until
// the manager has written each TrainJob Complete or Failed.
func finishJobSets(ctx context.Context, c client.Client, obs *observer, which []int, completed func(i int) bool) error {
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range 32 {
		wg.Go(func() {
			for i := range next {
				state, reason, message := "Completed", "AllJobsCompleted", "jobset completed successfully"
				if !completed(i) {
					state, reason, message = "Failed", "FailedJobs", "jobset failed due to one or more job failures"
				}
				patch := fmt.Sprintf(`{"status":{"terminalState":%q,"conditions":[{"type":%q,"status":"True",`+
					`"reason":%q,"message":%q,"lastTransitionTime":%q}]}}`,
					state, state, reason, message, time.Now().UTC().Format(time.RFC3339))
				js := &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: obs.prefix + strconv.Itoa(i)}}
				if err := c.Status().Patch(ctx, js, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, i := range which {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return obs.waitUntil(10*time.Minute, "the finished JobSets' TrainJobs to be Complete or Failed", func(o *observer) bool {
		return len(o.finished) == len(which)
	})
}

// restarted is what a restart of the manager took.
type restarted struct {
	// ready is from the program's start to every controller's workers started (caches synced);
	// steady to its queues empty after a reconcile of every TrainJob.
	ready, steady time.Duration
	// apiCPU and managerCPU are the API server's and the manager's CPU time until steady.
	apiCPU, managerCPU time.Duration
	// writes are the restarted manager's writes until steady, by verb, resource and code; reads
	// the lists and watches meanwhile. Both are the API server's, of every client.
	writes, reads requests
}

// failover measures a hand-over at size as an install of two replicas makes it in a rollout: a
// leader and a standby, both electing, the standby's caches synced (it asks for the lease) and the
// API server calm; the leader stopped (SIGTERM: it releases the lease); the standby's time from the
// stop's start to its workers started and to steady, with the writes and the lists and watches
// meanwhile (a warm standby needs none). It returns the new leader.
func failover(ctx context.Context, b *testing.B, cluster *testenv.Cluster, cp *controlPlane, m *manager, want float64) (*manager, *restarted, error) {
	m.program.Stop()
	elect := []string{"--leader-elect", "--leader-elect-namespace=" + testenv.OperatorNamespace}
	leader, err := launchManager(cluster, nil, elect...)
	if err != nil {
		return nil, nil, err
	}
	if err := leader.waitForWorkers(); err != nil {
		return nil, nil, err
	}
	if err := leader.settle(want); err != nil {
		return nil, nil, err
	}
	standby, err := launchManager(cluster, nil, elect...)
	if err != nil {
		return nil, nil, err
	}
	if err := standby.standingBy(); err != nil {
		return nil, nil, err
	}
	cp.calm(b)
	before, err := cp.sample(ctx)
	if err != nil {
		return nil, nil, err
	}
	start := time.Now()
	leader.program.Stop()
	r, err := untilSteady(ctx, cp, standby, before, start, want)
	return standby, r, err
}

// standingBy waits until the manager asks for the lease: controller-runtime starts its leader
// election once its caches have synced.
func (m *manager) standingBy() error {
	return m.waitForLog("Attempting to acquire leader lease", 1, "the standby did not ask for the lease")
}

// restartAndCount stops the manager, starts it again, and waits until it has reconciled at least
// want times and its queues stayed empty, counting its writes. With profile, it writes a CPU
// profile of the restarted manager's first 30 seconds there.
func restartAndCount(ctx context.Context, cluster *testenv.Cluster, cp *controlPlane, m *manager, want float64, profile string) (*manager, *restarted, error) {
	m.program.Stop()
	before, err := cp.sample(ctx)
	if err != nil {
		return nil, nil, err
	}
	start := time.Now()
	if m, err = launchManager(cluster, nil); err != nil {
		return nil, nil, err
	}
	profiled := make(chan error, 1)
	if profile != "" {
		go func() { profiled <- m.profile(profile, 30) }()
	} else {
		profiled <- nil
	}
	r, err := untilSteady(ctx, cp, m, before, start, want)
	if err != nil {
		return nil, nil, err
	}
	if r.managerCPU, err = m.cpuTime(); err != nil {
		return nil, nil, err
	}
	if err := <-profiled; err != nil {
		return nil, nil, err
	}
	return m, r, nil
}

// untilSteady times a manager from start to its workers started (ready) and to steady: it has
// reconciled at least want times and its queues stayed empty. It counts the API server's CPU and
// the writes since before.
func untilSteady(ctx context.Context, cp *controlPlane, m *manager, before *sample, start time.Time, want float64) (*restarted, error) {
	if err := m.waitForWorkers(); err != nil {
		return nil, err
	}
	r := &restarted{ready: time.Since(start)}
	if err := m.settle(want); err != nil {
		return nil, err
	}
	r.steady = time.Since(start) - settleQuiet
	after, err := cp.sample(ctx)
	if err != nil {
		return nil, err
	}
	r.apiCPU = after.apiCPU - before.apiCPU
	requested := after.requestsSince(before)
	// Leases are the API server's own, and the leader election's.
	r.writes = requested.where(func(k requestKey) bool {
		return k.verb != "GET" && k.verb != "LIST" && k.verb != "WATCH" && k.resource != "leases"
	})
	r.reads = requested.where(func(k requestKey) bool { return k.verb == "LIST" || k.verb == "WATCH" })
	return r, nil
}
