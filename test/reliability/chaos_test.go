package reliability

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

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
	jobs := mix(*chaosTrainJobs, true)

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
	seen.check(t, ns, jobs)
	for _, m := range append(managers, last) {
		assert.Empty(t, errorLines(t, m), "errors in %s", m.Log())
	}
}
