package controller

import (
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
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
