package tokenreview

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestAJoinedCheckOutlivesItsFirstCaller: callers of one token share one review; the first caller
// going away (its client hung up) fails neither the review nor the callers still waiting for it.
func TestAJoinedCheckOutlivesItsFirstCaller(t *testing.T) {
	started, answer := make(chan struct{}), make(chan struct{})
	var reviews int
	c := fake.NewClientBuilder().WithScheme(runtime.NewScheme()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			reviews++
			close(started)
			<-answer
			if err := ctx.Err(); err != nil {
				return err
			}
			review := obj.(*authenticationv1.TokenReview)
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "trainer"}}
			return nil
		},
	}).Build()
	r := New(c, Options{GoodTTL: time.Minute, BadTTL: time.Minute, Size: 10, Wait: time.Second})

	first, hangUp := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var firstErr error
	wg.Go(func() { _, firstErr = r.Review(first, "10.0.0.1", "token", "") })
	<-started
	var second *authenticationv1.UserInfo
	var secondErr error
	wg.Go(func() { second, secondErr = r.Review(context.Background(), "10.0.0.2", "token", "") })
	// The second caller joins the review under way (singleflight), then the first hangs up.
	time.Sleep(50 * time.Millisecond)
	hangUp()
	close(answer)
	wg.Wait()
	assert.ErrorIs(t, firstErr, context.Canceled, "the caller that went away")
	require.NoError(t, secondErr)
	require.NotNil(t, second)
	assert.Equal(t, "trainer", second.Username)
	assert.Equal(t, 1, reviews)
}
