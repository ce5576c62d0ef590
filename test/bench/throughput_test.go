// Package bench measures the operator end to end: the real manager, with cmd/main.go's defaults,
// against a real kube-apiserver. Run it with `make bench`.
package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

var k8sClient client.Client

func TestMain(m *testing.M) {
	flag.Parse()
	if flag.Lookup("test.bench").Value.String() == "" {
		os.Exit(m.Run()) // No benchmark asked for, as in `make test`: no cluster to start.
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	cluster, err := testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	stop, err := cluster.StartManager(controller.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	k8sClient = cluster.Client
	return m.Run()
}

// batch is how many TrainJobs arrive at once in each iteration.
const batch = 200

// BenchmarkTrainJobThroughput submits batches of TrainJobs concurrently, as many users or a
// queue admitting many at once would, and waits until every one has its JobSet and Created=True.
// It reports TrainJobs per second, end to end.
func BenchmarkTrainJobThroughput(b *testing.B) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	if err := k8sClient.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	rt := utiltesting.ClusterTrainingRuntime(ns.Name, utiltesting.MakeRuntimeSpec().NumNodes(2).Torch(&trainer.TorchMLPolicySource{}).Obj())
	if err := k8sClient.Create(ctx, rt); err != nil {
		b.Fatal(err)
	}
	submitted := 0
	for b.Loop() {
		first := submitted
		submitted += batch
		if err := submit(ctx, ns.Name, rt.Name, first, submitted); err != nil {
			b.Fatal(err)
		}
		if err := waitCreated(ctx, ns.Name, submitted); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(submitted)/b.Elapsed().Seconds(), "trainjobs/s")
}

// submit creates TrainJobs first..last-1 with 16 clients at once.
func submit(ctx context.Context, ns, runtime string, first, last int) error {
	var (
		wg   sync.WaitGroup
		errs = make(chan error, last-first)
		next = make(chan int)
	)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				tj := utiltesting.MakeTrainJob(fmt.Sprintf("tj-%d", i), ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Obj()
				if err := k8sClient.Create(ctx, tj); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := first; i < last; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

// waitCreated waits until n TrainJobs of the namespace are Created.
func waitCreated(ctx context.Context, ns string, n int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		list := &trainer.TrainJobList{}
		if err := k8sClient.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		created := 0
		for i := range list.Items {
			if apimeta.IsStatusConditionTrue(list.Items[i].Status.Conditions, trainer.TrainJobCreated) {
				created++
			}
		}
		if created == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d TrainJobs created after 5 minutes", created, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
