package main

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// freePort is a loopback port nothing listens on.
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// run starts one probe per env, all at once, and returns each one's error.
func run(t *testing.T, framework string, envs []map[string]string) []error {
	errs := make([]error, len(envs))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, env := range envs {
		wg.Go(func() {
			g, err := wiring(framework, func(name string) string { return env[name] })
			if err == nil {
				err = g.meet(ctx, io.Discard)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errs
}

// ranks are n processes' env vars, each from env(rank).
func ranks(n int, env func(rank string) map[string]string) []map[string]string {
	var envs []map[string]string
	for i := range n {
		envs = append(envs, env(strconv.Itoa(i)))
	}
	return envs
}

func TestEveryFrameworksGroupMeetsThroughItsWiring(t *testing.T) {
	port := freePort(t)
	cases := map[string][]map[string]string{
		"torch": ranks(3, func(rank string) map[string]string {
			return map[string]string{"PET_MASTER_ADDR": "localhost", "PET_MASTER_PORT": port, "PET_NNODES": "3", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": rank}
		}),
		"xgboost": ranks(2, func(rank string) map[string]string {
			return map[string]string{"DMLC_TRACKER_URI": "localhost", "DMLC_TRACKER_PORT": port, "DMLC_NUM_WORKER": "2", "DMLC_TASK_ID": rank}
		}),
		"jax": ranks(4, func(rank string) map[string]string {
			return map[string]string{"JAX_COORDINATOR_ADDRESS": "localhost:" + port, "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": rank}
		}),
	}
	for framework, envs := range cases {
		t.Run(framework, func(t *testing.T) {
			for rank, err := range run(t, framework, envs) {
				assert.NoError(t, err, "rank %d", rank)
			}
		})
	}
	t.Run("torch elastic", func(t *testing.T) {
		envs := ranks(2, func(rank string) map[string]string {
			return map[string]string{"PET_RDZV_ENDPOINT": "localhost:" + port, "PET_RDZV_BACKEND": "c10d", "PET_NNODES": "1:2", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": rank}
		})
		for rank, err := range run(t, "torch", envs) {
			assert.NoError(t, err, "rank %d", rank)
		}
	})
}

func TestBrokenWiringFailsTheGroup(t *testing.T) {
	port, wrong := freePort(t), freePort(t)
	jax := func(address, processes, id string) map[string]string {
		return map[string]string{"JAX_COORDINATOR_ADDRESS": address, "JAX_NUM_PROCESSES": processes, "JAX_PROCESS_ID": id}
	}
	cases := map[string][]map[string]string{
		"a rank told the wrong port": {
			jax("localhost:"+port, "2", "0"), jax("localhost:"+wrong, "2", "1"),
		},
		"a rank missing": {
			jax("localhost:"+port, "3", "0"), jax("localhost:"+port, "3", "1"),
		},
		"two ranks the same": {
			jax("localhost:"+port, "3", "0"), jax("localhost:"+port, "3", "1"), jax("localhost:"+port, "3", "1"),
		},
		"ranks that disagree on the group's size": {
			jax("localhost:"+port, "2", "0"), jax("localhost:"+port, "3", "1"),
		},
	}
	for name, envs := range cases {
		t.Run(name, func(t *testing.T) {
			errs := run(t, "jax", envs)
			assert.Error(t, errs[0], "rank 0 must fail when the group does not form")
		})
	}
}

func TestWiringThatCannotBeReadIsAnError(t *testing.T) {
	cases := map[string]struct {
		framework string
		env       map[string]string
	}{
		"no address":           {"jax", map[string]string{"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0"}},
		"no port":              {"torch", map[string]string{"PET_MASTER_ADDR": "a", "PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": "0"}},
		"a rank not a number":  {"xgboost", map[string]string{"DMLC_TRACKER_URI": "a", "DMLC_TRACKER_PORT": "1", "DMLC_NUM_WORKER": "2", "DMLC_TASK_ID": "x"}},
		"a rank out of range":  {"xgboost", map[string]string{"DMLC_TRACKER_URI": "a", "DMLC_TRACKER_PORT": "1", "DMLC_NUM_WORKER": "2", "DMLC_TASK_ID": "2"}},
		"an unknown framework": {"mxnet", map[string]string{}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := wiring(c.framework, func(name string) string { return c.env[name] })
			assert.Error(t, err)
		})
	}
}
