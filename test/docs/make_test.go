package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMakeRunWithARealNodeStartsBeforeTheLateBuilds: on a fresh machine (an empty bin/), `make run
// CLUSTER_ARGS=-real-node` builds what a TrainJob and the real node need, then starts the cluster,
// which Kueue and metrics-server join once built: neither is built before it starts (they took 10
// minutes of the first run).
func TestMakeRunWithARealNodeStartsBeforeTheLateBuilds(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	cmd := exec.Command("make", "-n", "run", "CLUSTER_ARGS=-real-node", "LOCALBIN="+t.TempDir())
	cmd.Dir, cmd.Env = root, append(os.Environ(), "MAKEFLAGS=")
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	plan := string(out)
	start := strings.Index(plan, "localcluster -real-node")
	require.Positive(t, start, "make run starts no cluster:\n%s", plan)
	before := plan[:start]
	// buildstep runs each build: `buildstep -bin DIR NAME -- go build ...`.
	for _, program := range []string{"kubelet", "kube-proxy", "coredns", "kube-apiserver", "jobset-controller"} {
		assert.True(t, strings.Contains(before, " "+program+" -- "), "%s is not built before the cluster starts", program)
	}
	for _, late := range []string{"kueue", "metrics-server"} {
		assert.False(t, strings.Contains(before, " "+late+" -- "), "%s is built before the cluster starts", late)
	}
}
