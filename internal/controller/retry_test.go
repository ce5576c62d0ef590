package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A TrainJob whose reconciles keep failing is tried again at most a minute apart, and at once
// after a success.
func TestRetriesWaitAtMostAMinute(t *testing.T) {
	limiter := retryLimiter()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "bert"}}
	assert.Equal(t, 5*time.Millisecond, limiter.When(req))
	var last time.Duration
	for range 30 {
		last = limiter.When(req)
	}
	assert.Equal(t, MaxRetryDelay, last, "client-go's default would wait 1,000 s")
	limiter.Forget(req)
	assert.Equal(t, 5*time.Millisecond, limiter.When(req))
}
