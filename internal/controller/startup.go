package controller

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// startupBackoff is how long the manager, while it starts, keeps asking an API server that fails
// or throttles for what it needs (discovery): about a minute and a half, doubling from half a
// second. A manager that gave up at once would wait for its pod's restart, and its backoff.
var startupBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 9, Cap: 30 * time.Second}

// RetryStartup runs a start-up step that reads the API server until it succeeds or the backoff
// is spent, and logs each failure.
func RetryStartup(log logr.Logger, what string, step func() error) error {
	return retry.OnError(startupBackoff, func(err error) bool {
		log.Info("Trying again: the API server failed", "step", what, "error", err.Error())
		return true
	}, step)
}

// SoftMemoryLimit is the memory the Go runtime keeps the manager under, collecting more often as
// it nears it, for a container limited to containerLimit bytes (the MEMORY_LIMIT the install
// sets from the container's limits.memory): nine tenths of it, the rest left for what the Go
// runtime does not count (the executable's pages). A manager that starts with tens of thousands
// of TrainJobs decodes them all at once, and without a limit its heap grows to twice what it
// keeps: past the container's limit, where the kernel would kill it at each start. ok is false
// when containerLimit is not a number of bytes.
func SoftMemoryLimit(containerLimit string) (limit int64, ok bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(containerLimit), 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n / 10 * 9, true
}

// CachesSynced is a readiness check that passes once the manager's caches have listed what they
// hold, and from then on. A replica that is not ready is not sent webhook calls by its Service,
// and a rollout does not stop the replica it replaces: with tens of thousands of TrainJobs the
// caches take seconds to fill, and until then admission would read each runtime from the API
// server. ctx ends the wait with the manager.
func CachesSynced(ctx context.Context, c cache.Cache) healthz.Checker {
	synced := make(chan struct{})
	go func() {
		if c.WaitForCacheSync(ctx) {
			close(synced)
		}
	}()
	return func(*http.Request) error {
		select {
		case <-synced:
			return nil
		default:
			return errors.New("the caches have not synced yet")
		}
	}
}
