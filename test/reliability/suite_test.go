// Package reliability kills, restarts and doubles the operator's manager while it works, and
// checks that nothing is lost or duplicated. The manager runs as its own program, built from
// this tree, against a real kube-apiserver; JobSet's controller does not run (pods do not matter
// here): the tests write JobSet status where they need it, as JobSet would.
package reliability

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainjob/operator/test/testenv"
)

var (
	cluster   *testenv.Cluster
	k8sClient client.Client
	// managerPath is the manager built from this tree.
	managerPath string
)

// The sizes of the runs: small enough for CI by default; `make test-reliability` runs the full
// ones.
var (
	chaosTrainJobs = flag.Int("chaos-trainjobs", 200, "TrainJobs the chaos test submits")
	chaosKills     = flag.Int("chaos-kills", 10, "times the chaos test kills the manager")
	chaosSeed      = flag.Int64("chaos-seed", 0, "seed of the chaos test's random kills; 0 picks one (the test logs it)")
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	var err error
	if cluster, err = testenv.Start(testenv.WithoutJobSetWebhooks, testenv.WithAuditLog); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	k8sClient = cluster.Client
	if managerPath, err = testenv.BuildManager(cluster.Dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := cluster.Install(context.Background(), "config/runtimes"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// Polling limits for what a manager does once it runs.
const (
	timeout  = 3 * time.Minute
	interval = 250 * time.Millisecond
)
