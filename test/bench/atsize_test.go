package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/cli"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// Of every ten TrainJobs that exist before the measured runs (-existing): six completed, one
// failed, two suspended by their users, one queued in Kueue (suspended, with a queue's label),
// as a busy cluster holds them until their TTL.
const (
	existingCompleted = 6
	existingFailed    = 1
	existingSuspended = 2
)

// kueueQueueLabel is the label by which Kueue queues a job.
const kueueQueueLabel = "kueue.x-k8s.io/queue-name"

// atSize is what one workload's API server holding -existing TrainJobs saw of restarts.
type atSize struct {
	workload string
	// quiet is a restart with nothing to do; probed one with a TrainJob created while the manager
	// was stopped, whose JobSet appeared probe after the restarted manager's workers started.
	quiet, probed *restarted
	probe         time.Duration
	// failedOver is a standby's takeover when the leader stops (failover).
	failedOver *restarted
	// restartRSS is the peak RSS of the manager of the quiet restart, once steady.
	restartRSS uint64
	// floorReady is the restart's floor: how long plain caches of the kinds every TrainJob
	// operator must read took to sync, while the manager was stopped; floorAPICPU the API
	// server's CPU time meanwhile.
	floorReady, floorAPICPU time.Duration
	// list is `kubectl trainjob list -A` at size, console its console.
	list    listed
	console consoled
	// admitted is an operator run with the operator's webhooks in each create's path.
	admitted *admitted
}

// admitted is an operator run at size with the operator's webhooks called for each TrainJob's
// create, as an install has them: the run, with how long the API server's calls of the webhooks
// took (run.webhooks, each call's round trip), and the webhook server's mean time to answer one
// (its handling: controller_runtime_webhook_latency_seconds, whose buckets are powers of ten).
type admitted struct {
	run        *result
	serverMean time.Duration
}

// consoled is what `kubectl trainjob console -A` took, as its page reads it: to its first rows,
// to the whole list read, and to a filter's answer; the bytes of a page, and the heap the
// console kept (this process's, with the console holding every TrainJob's summary).
type consoled struct {
	first, all, filter time.Duration
	pageBytes          int
	heap               uint64
}

// listed is what `kubectl trainjob list -A` took: to its first row and to its last, and the rows.
type listed struct {
	first, all time.Duration
	rows       int
}

// sizes are the at-size figures, printed at the end.
var sizes []atSize

// measureAtSize measures a workload's -repeat pairs in one API server that holds -existing
// TrainJobs, mixed as a cluster holds them, made by the operator itself. Before the pairs, it
// measures a restart's floor (syncFloor) and restarts the manager twice: once to count what a
// restart at size writes and how long it takes, once with a TrainJob created while the manager
// was stopped (-manager-profile profiles the first's first 30 seconds), measures a failover
// (failover), and times `kubectl trainjob list -A` (listAll) and its console (openConsole). For each floor run the manager is stopped, and the floor's
// TrainJobs are managed by MultiKueue, so that the operator leaves them alone when it runs
// again; for each operator run it is started again and settles first.
func measureAtSize(b *testing.B, w workload) {
	ctx := context.Background()
	bd := newBed(b, w)
	defer bd.cluster.Stop()
	m, err := startManager(bd.cluster)
	if err != nil {
		bd.fail(err)
	}
	start := time.Now()
	if err := populate(ctx, bd, *existing); err != nil {
		bd.fail(err)
	}
	b.Logf("%d TrainJobs made and finished in %s", *existing, time.Since(start).Round(time.Second))
	limitMemory = true
	defer func() { limitMemory = false }()

	// Every TrainJob the operator manages is reconciled once at start; a gang's by the gang
	// controller as well.
	managed := *existing
	want := func() float64 {
		if w.coscheduling {
			return float64(2 * managed)
		}
		return float64(managed)
	}
	figures := atSize{workload: w.name}
	m.program.Stop()
	before, err := bd.cp.sample(ctx)
	if err != nil {
		bd.fail(err)
	}
	if figures.floorReady, err = syncFloor(ctx, bd.cluster.Env.Config, w); err != nil {
		bd.fail(err)
	}
	after, err := bd.cp.sample(ctx)
	if err != nil {
		bd.fail(err)
	}
	figures.floorAPICPU = after.apiCPU - before.apiCPU
	profile := ""
	if *managerProfile != "" {
		profile = *managerProfile + ".restart." + w.name
	}
	apiProfiled := make(chan error, 1)
	if *apiProfile != "" {
		go func() { apiProfiled <- bd.cp.profile(ctx, *apiProfile+".restart."+w.name, 15) }()
	} else {
		apiProfiled <- nil
	}
	if m, figures.quiet, err = restartAndCount(ctx, bd.cluster, bd.cp, m, want(), profile); err != nil {
		bd.fail(err)
	}
	if err := <-apiProfiled; err != nil {
		bd.fail(err)
	}
	if figures.restartRSS, err = m.peakRSS(); err != nil {
		bd.fail(err)
	}
	if *managerHeap != "" {
		if err := m.heap(*managerHeap + ".restart." + w.name); err != nil {
			bd.fail(err)
		}
	}
	if m, figures.probed, figures.probe, err = restartWithProbe(ctx, bd, m); err != nil {
		bd.fail(err)
	}
	if m, figures.failedOver, err = failover(ctx, b, bd.cluster, bd.cp, m, want()); err != nil {
		bd.fail(err)
	}
	if figures.list, err = listAll(bd.cluster); err != nil {
		bd.fail(err)
	}
	if figures.console, err = openConsole(bd.cluster, *existing); err != nil {
		bd.fail(err)
	}
	managed++
	if m, figures.admitted, err = admit(ctx, b, bd, m, w, want()); err != nil {
		bd.fail(err)
	}
	managed += *count
	sizes = append(sizes, figures)

	for i := range *repeat {
		c := comparison{workload: fmt.Sprintf("%s@%d", w.name, *existing)}
		if *repeat > 1 {
			c.workload += fmt.Sprintf("#%d", i+1)
		}
		m.program.Stop()
		bd.cp.calm(b)
		// The floor's TrainJobs are MultiKueue's: the operator leaves them alone once it runs again.
		multiKueue := loadOptions{shape: func(_ int, tj *trainer.TrainJob) { tj.Spec.ManagedBy = ptr.To(trainer.MultiKueueControllerName) }}
		b.Run(c.workload+"/floor", func(b *testing.B) {
			c.floor = bd.run(b, w, floorWriter, fmt.Sprintf("floor%d-", i+1), nil, multiKueue)
		})
		if *watchedFloor {
			stop, err := watchAsAnOperator(ctx, bd.cluster.Env.Config, w)
			if err != nil {
				bd.fail(err)
			}
			bd.cp.calm(b)
			b.Run(c.workload+"/watched-floor", func(b *testing.B) {
				c.watched = bd.run(b, w, floorWriter, fmt.Sprintf("watched%d-", i+1), nil, multiKueue)
			})
			stop()
		}
		if m, err = startManager(bd.cluster); err != nil {
			bd.fail(err)
		}
		if err := m.settle(want()); err != nil {
			bd.fail(err)
		}
		bd.cp.calm(b)
		b.Run(c.workload+"/operator", func(b *testing.B) {
			c.operator = bd.run(b, w, operatorWriter, fmt.Sprintf("op%d-", i+1), m, loadOptions{})
		})
		managed += *count
		if c.floor != nil && c.operator != nil {
			comparisons = append(comparisons, c)
		}
	}
}

// calm waits, two minutes at most, until the API server and etcd together use under a tenth of a
// core over two seconds: at size, the manager's restart just before an operator run leaves the
// API server collecting the garbage of 50,000 objects sent, which would be the run's cost and not
// the floor's. Each side of a pair waits so.
func (cp *controlPlane) calm(b *testing.B) {
	began := time.Now()
	for {
		before, err := cp.usage()
		if err != nil {
			b.Logf("calm: %v", err)
			return
		}
		time.Sleep(2 * time.Second)
		after, err := cp.usage()
		if err != nil {
			b.Logf("calm: %v", err)
			return
		}
		if used := after - before; used < 200*time.Millisecond || time.Since(began) > 2*time.Minute {
			b.Logf("calm after %s: %.2f cores", time.Since(began).Round(time.Second), used.Seconds()/2)
			return
		}
	}
}

// usage is the CPU time the API server and etcd used so far.
func (cp *controlPlane) usage() (time.Duration, error) {
	api, err := cpuTime(cp.apiServer)
	if err != nil {
		return 0, err
	}
	etcd, err := cpuTime(cp.etcd)
	return api + etcd, err
}

// populate has the running manager make n TrainJobs, named old-0 and on, mixed as a cluster
// holds them, with trainers as the SDK writes them, then finishes those that are neither
// suspended nor queued.
func populate(ctx context.Context, bd *bed, n int) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	obs, err := watch(ctx, bd.cluster.Env.Config, "old-", n)
	if err != nil {
		return err
	}
	running := existingCompleted + existingFailed
	shape := func(i int, tj *trainer.TrainJob) {
		tj.Spec.Trainer = sdkTrainer()
		switch {
		case i%10 < running:
		case i%10 < running+existingSuspended:
			tj.Spec.Suspend = ptr.To(true)
		default:
			tj.Spec.Suspend = ptr.To(true)
			tj.Labels = map[string]string{kueueQueueLabel: "bench"}
		}
	}
	if err := load(ctx, bd.cluster.Client, bd.rt, operatorWriter, obs, n, loadOptions{clients: 32, shape: shape}); err != nil {
		return err
	}
	if err := obs.wait(time.Hour); err != nil {
		return err
	}
	var finish []int
	for i := range n {
		if i%10 < running {
			finish = append(finish, i)
		}
	}
	return finishJobSets(ctx, bd.cluster.Client, obs, finish, func(i int) bool { return i%10 < existingCompleted })
}

// sdkTrainer is a trainer as Kubeflow's Python SDK writes it for a training function: the
// function's source in its arguments, run by torchrun, with an image, GPUs and a few variables.
// A cluster's TrainJobs are mostly the SDK's, and their trainers are most of their size.
func sdkTrainer() *trainer.Trainer {
	return &trainer.Trainer{
		NumNodes: ptr.To[int32](2),
		Image:    ptr.To("pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"),
		Command:  []string{"bash", "-c"},
		Args:     []string{sdkScript},
		Env: []corev1.EnvVar{
			{Name: "HF_HOME", Value: "/workspace/cache"}, {Name: "WANDB_PROJECT", Value: "bench"}, {Name: "LEARNING_RATE", Value: "3e-4"},
		},
		ResourcesPerNode: &corev1.ResourceRequirements{Limits: corev1.ResourceList{
			"nvidia.com/gpu": resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("512Gi"),
		}},
	}
}

// sdkScript is what the SDK's arguments look like: packages to install, then the function.
const sdkScript = `
if ! [ -x "$(command -v pip)" ]; then
    python -m ensurepip || python -m ensurepip --user || apt-get install python-pip
fi
PIP_DISABLE_PIP_VERSION_CHECK=1 python -m pip install --quiet --no-warn-script-location --user transformers datasets accelerate
read -r -d '' SCRIPT << EOM
def train_fn(lr: float = 3e-4, epochs: int = 3):
    import os
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    tokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B").cuda()
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    data = load_dataset("tatsu-lab/alpaca", split="train")
    data = data.map(lambda x: tokenizer(x["text"], truncation=True, max_length=512), batched=True)
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        for step, batch in enumerate(loader):
            loss = model(**{k: v.cuda() for k, v in batch.items()}, labels=batch["input_ids"].cuda()).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if step % 100 == 0 and dist.get_rank() == 0:
                print(f"epoch={epoch} step={step} loss={loss.item():.4f}")
    dist.destroy_process_group()

train_fn(**{'lr': 0.0003, 'epochs': 3})
EOM
printf "%s" "$SCRIPT" > "$PWD/train_fn.py"
torchrun "$PWD/train_fn.py"`

// admit measures an operator run (-trainjobs, at -rate) with the operator's webhooks in the path
// of each create, as config/webhook ships them (failurePolicy Fail): it starts the manager again
// serving them, installs their configurations, settles (the manager having reconciled want
// times), makes the run, and removes the configurations again, so that the floor's runs, made
// with the manager stopped, are not refused. It returns the manager it started, still running.
func admit(ctx context.Context, b *testing.B, bd *bed, m *manager, w workload, want float64) (_ *manager, _ *admitted, err error) {
	m.program.Stop()
	hooks, err := testenv.OperatorWebhooks()
	if err != nil {
		return nil, nil, err
	}
	if err := hooks.PrepWithoutInstalling(); err != nil {
		return nil, nil, err
	}
	b.Cleanup(func() { _ = hooks.Cleanup() })
	// The CA beside the certificate, where an install's certificate provider writes it: the
	// progress endpoint is wired as an install's, into each TrainJob's JobSet.
	if err := os.WriteFile(filepath.Join(hooks.LocalServingCertDir, "ca.crt"), hooks.LocalServingCAData, 0o600); err != nil {
		return nil, nil, err
	}
	if m, err = launchManager(bd.cluster, &hooks); err != nil {
		return nil, nil, err
	}
	addr := net.JoinHostPort(hooks.LocalServingHost, strconv.Itoa(hooks.LocalServingPort))
	for deadline := time.Now().Add(5 * time.Minute); !testenv.ServesTLS(addr); time.Sleep(50 * time.Millisecond) {
		if err := m.program.Exited(); err != nil {
			return nil, nil, err
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("the manager did not serve its webhooks at %s within 5 minutes; see %s", addr, m.program.Log())
		}
	}
	if err := hooks.Install(bd.cluster.Env.Config); err != nil {
		return nil, nil, err
	}
	defer func() {
		for _, c := range hooks.MutatingWebhooks {
			err = errors.Join(err, client.IgnoreNotFound(bd.cluster.Client.Delete(ctx, c)))
		}
		for _, c := range hooks.ValidatingWebhooks {
			err = errors.Join(err, client.IgnoreNotFound(bd.cluster.Client.Delete(ctx, c)))
		}
	}()
	if err := m.waitForWorkers(); err != nil {
		return nil, nil, err
	}
	if err := m.settle(want); err != nil {
		return nil, nil, err
	}
	bd.cp.calm(b)
	before, err := m.served()
	if err != nil {
		return nil, nil, err
	}
	a := &admitted{}
	b.Run(fmt.Sprintf("%s@%d/admission", w.name, *existing), func(b *testing.B) {
		a.run = bd.run(b, w, operatorWriter, "adm-", m, loadOptions{})
	})
	after, err := m.served()
	if err != nil {
		return nil, nil, err
	}
	if n := after.calls - before.calls; n > 0 {
		a.serverMean = time.Duration((after.seconds - before.seconds) / n * float64(time.Second))
	}
	// Each create is admitted by two: the TrainJob's defaulting and its validation.
	if calls := a.run.webhooks.count(); calls < float64(2*a.run.n) {
		return nil, nil, fmt.Errorf("the API server called the operator's webhooks %.0f times for %d TrainJobs", calls, a.run.n)
	}
	return m, a, nil
}

// restartWithProbe stops the manager, creates a TrainJob, starts the manager again, and measures
// from its workers' start (its caches synced) to that TrainJob's JobSet.
func restartWithProbe(ctx context.Context, bd *bed, m *manager) (*manager, *restarted, time.Duration, error) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	obs, err := watch(ctx, bd.cluster.Env.Config, "probe-", 1)
	if err != nil {
		return nil, nil, 0, err
	}
	m.program.Stop()
	if err := load(ctx, bd.cluster.Client, bd.rt, operatorWriter, obs, 1, loadOptions{}); err != nil {
		return nil, nil, 0, err
	}
	start := time.Now()
	if m, err = startManager(bd.cluster); err != nil {
		return nil, nil, 0, err
	}
	r := &restarted{ready: time.Since(start)}
	if err := obs.wait(time.Minute); err != nil {
		return nil, nil, 0, err
	}
	return m, r, obs.last().Sub(start.Add(r.ready)), nil
}

// syncFloor is the floor of a restart: the time plain caches of TrainJobs, JobSets and, for a gang,
// PodGroups take to sync, with client-go's own decoding, no transform and no controller: what
// any operator of TrainJobs must read at its start.
func syncFloor(ctx context.Context, cfg *rest.Config, w workload) (time.Duration, error) {
	start := time.Now()
	stop, err := watchAsAnOperator(ctx, cfg, w)
	if err != nil {
		return 0, err
	}
	stop()
	return time.Since(start), nil
}

// watchAsAnOperator starts plain caches of the kinds every operator of the workload's TrainJobs
// must watch (TrainJobs, JobSets and, for a gang, PodGroups), with client-go's own decoding, no
// transform and no controller, and waits until they have synced; stop stops them.
func watchAsAnOperator(ctx context.Context, cfg *rest.Config, w workload) (stop func(), err error) {
	ctx, stop = context.WithCancel(ctx)
	defer func() {
		if err != nil {
			stop()
		}
	}()
	c, err := cache.New(cfg, cache.Options{Scheme: testenv.Scheme})
	if err != nil {
		return nil, err
	}
	kinds := []client.Object{&trainer.TrainJob{}, &jobsetv1alpha2.JobSet{}}
	if w.coscheduling {
		kinds = append(kinds, &schedulerpluginsv1alpha1.PodGroup{})
	}
	for _, kind := range kinds {
		if _, err := c.GetInformer(ctx, kind); err != nil {
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, errors.New("the floor's caches did not sync")
	}
	return stop, nil
}

// listAll runs `kubectl trainjob list -A` as a user would, in this process, and times its first row
// (after the header) and its last.
func listAll(cluster *testenv.Cluster) (listed, error) {
	kubeconfig, err := cluster.Kubeconfig("bench-list")
	if err != nil {
		return listed{}, err
	}
	out := &rowClock{start: time.Now()}
	var errOut bytes.Buffer
	if code := cli.Main([]string{"list", "-A", "--kubeconfig", kubeconfig}, nil, out, &errOut); code != 0 {
		return listed{}, fmt.Errorf("kubectl trainjob list -A exited with %d: %s", code, errOut.String())
	}
	return listed{first: out.first, all: time.Since(out.start), rows: out.lines - 1}, nil
}

// openConsole serves `kubectl trainjob console -A` in this process as a user would, and reads
// its list as the page does, through the console's stream: it times the first rows, the whole
// list read (n TrainJobs or more), and, then, a filter that keeps one of them.
func openConsole(cluster *testenv.Cluster, n int) (consoled, error) {
	kubeconfig, err := cluster.Kubeconfig("bench-console")
	if err != nil {
		return consoled{}, err
	}
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Minute)
	defer stop()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	out, errOut := &utiltesting.SyncBuffer{}, &utiltesting.SyncBuffer{}
	start := time.Now()
	exited := make(chan int, 1)
	go func() {
		exited <- cli.Run(ctx, []string{"console", "-A", "--kubeconfig", kubeconfig}, nil, out, errOut)
	}()
	defer func() { stop(); <-exited }()
	var url string
	for url == "" {
		select {
		case code := <-exited:
			exited <- code
			return consoled{}, fmt.Errorf("kubectl trainjob console -A exited with %d: %s", code, errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
		url = regexp.MustCompile(`http://127\.0\.0\.1:\d+/s/\S+/`).FindString(out.String())
	}

	var c consoled
	err = readPages(ctx, url+"api/stream", func(p consolePage, size int) bool {
		if c.first == 0 && len(p.Items) > 0 {
			c.first = time.Since(start)
		}
		if p.Listing || p.All < n {
			return true
		}
		c.all, c.pageBytes = time.Since(start), size
		return false
	})
	if err != nil {
		return consoled{}, err
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	c.heap = after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
	asked := time.Now()
	name := fmt.Sprintf("old-%d", n/2)
	var kept consolePage
	err = readPages(ctx, url+"api/stream?q="+name, func(p consolePage, _ int) bool {
		c.filter, kept = time.Since(asked), p
		return false
	})
	if err == nil && (kept.Matching != 1 || kept.Items[0].Key != "bench/"+name) {
		err = fmt.Errorf("the filter %s kept %d TrainJobs, not one", name, kept.Matching)
	}
	return c, err
}

// consolePage is what the console's stream sends of a page.
type consolePage struct {
	Items []struct {
		Key string `json:"key"`
	} `json:"items"`
	Matching int  `json:"matching"`
	All      int  `json:"all"`
	Listing  bool `json:"listing"`
}

// readPages reads the pages a console's stream sends, each with its size, until more says no
// more.
func readPages(ctx context.Context, url string, more func(p consolePage, size int) bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	events := bufio.NewReader(resp.Body)
	page := false
	for {
		line, err := events.ReadString('\n')
		if err != nil {
			return err
		}
		switch {
		case line == "event: page\n":
			page = true
		case page && strings.HasPrefix(line, "data: "):
			var p consolePage
			if err := json.Unmarshal([]byte(line[len("data: "):]), &p); err != nil {
				return err
			}
			if !more(p, len(line)) {
				return nil
			}
			page = false
		}
	}
}

// rowClock counts the lines written to it, and when the second (the first row) was.
type rowClock struct {
	start time.Time
	first time.Duration
	lines int
}

func (c *rowClock) Write(p []byte) (int, error) {
	c.lines += bytes.Count(p, []byte("\n"))
	if c.first == 0 && c.lines >= 2 {
		c.first = time.Since(c.start)
	}
	return len(p), nil
}

// printSizes prints what the restarts at size took and wrote.
func printSizes(out io.Writer) {
	if len(sizes) == 0 {
		return
	}
	fmt.Fprintf(out, "\nRestarts with %d TrainJobs existing (%d0%% finished, %d0%% suspended or queued) and those of the runs before\n\n",
		*existing, existingCompleted+existingFailed, 10-existingCompleted-existingFailed)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "workload\tfloor: caches synced s\tready s\tratio\tsteady s\tAPI CPU s floor / restart\tmanager CPU s\twrites\tpeak RSS MiB\twith a TrainJob made while stopped: ready s\tits JobSet after ready s\t")
	for _, s := range sizes {
		fmt.Fprintf(w, "%s\t%.1f\t%.1f\t%.2f\t%.1f\t%.1f / %.1f\t%.1f\t%.0f\t%.0f\t%.1f\t%.2f\t\n", s.workload, s.floorReady.Seconds(), s.quiet.ready.Seconds(),
			s.quiet.ready.Seconds()/s.floorReady.Seconds(), s.quiet.steady.Seconds(),
			s.floorAPICPU.Seconds(), s.quiet.apiCPU.Seconds(), s.quiet.managerCPU.Seconds(),
			s.quiet.writes.total(), float64(s.restartRSS)/(1<<20), s.probed.ready.Seconds(), s.probe.Seconds())
	}
	_ = w.Flush()
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "workload\tfailover, from the leader's stop: new leader's workers s\tsteady s\tAPI CPU s\twrites\tlists and watches\t")
	for _, s := range sizes {
		f := s.failedOver
		fmt.Fprintf(w, "%s\t%.1f\t%.1f\t%.1f\t%.0f\t%.0f\t\n", s.workload, f.ready.Seconds(), f.steady.Seconds(), f.apiCPU.Seconds(),
			f.writes.total(), f.reads.total())
	}
	_ = w.Flush()
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "workload\tkubectl trainjob list -A: first row s\tall rows s\trows\t")
	for _, s := range sizes {
		fmt.Fprintf(w, "%s\t%.2f\t%.1f\t%d\t\n", s.workload, s.list.first.Seconds(), s.list.all.Seconds(), s.list.rows)
	}
	_ = w.Flush()
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "workload\tkubectl trainjob console -A: first rows s\tall read s\ta filter ms\ta page KiB\theap kept MiB\t")
	for _, s := range sizes {
		c := s.console
		fmt.Fprintf(w, "%s\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", s.workload, c.first.Seconds(), c.all.Seconds(),
			float64(c.filter)/float64(time.Millisecond), float64(c.pageBytes)/1024, float64(c.heap)/(1<<20))
	}
	_ = w.Flush()
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "workload\twith the webhooks: JobSets/s\tp99 create to JobSet ms\trequests/TJ\twebhook calls/TJ\tAPI server's calls: within 5 ms %\twithin 25 ms %\twithin 100 ms %\tp99 at most ms\twebhook server's mean ms\t")
	for _, s := range sizes {
		a := s.admitted
		fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.0f\t%.2f\t\n", s.workload, a.run.throughput(), ms(a.run.p(99)),
			a.run.perTrainJob(a.run.requests), a.run.webhooks.count()/float64(a.run.n),
			100*a.run.webhooks.within(0.005), 100*a.run.webhooks.within(0.025), 100*a.run.webhooks.within(0.1),
			1000*a.run.webhooks.bound(0.99), ms(a.serverMean))
	}
	_ = w.Flush()
	for _, s := range sizes {
		fmt.Fprintf(out, "\n%s, admission: API requests per TrainJob, by verb, resource and code\n", s.workload)
		for _, k := range s.admitted.run.requests.kinds() {
			if v := s.admitted.run.requests[k] / float64(s.admitted.run.n); v >= 0.001 {
				fmt.Fprintf(out, "  %s\t%.3f\n", k, v)
			}
		}
	}
	_ = w.Flush()
	for _, s := range sizes {
		for _, k := range s.quiet.writes.kinds() {
			fmt.Fprintf(out, "  %s: %s\t%.0f\n", s.workload, k, s.quiet.writes[k])
		}
		for _, rs := range []requests{s.failedOver.writes, s.failedOver.reads} {
			for _, k := range rs.kinds() {
				fmt.Fprintf(out, "  %s, failover: %s\t%.0f\n", s.workload, k, rs[k])
			}
		}
	}
}
