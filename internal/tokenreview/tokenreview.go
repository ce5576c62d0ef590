// Package tokenreview asks the API server whose a bearer token is (a TokenReview), for the two
// endpoints of the operator that take tokens: the progress endpoint, where trainers report with a
// token of their TrainJob's audience, and the metrics guard. It remembers each answer, good for
// longer than bad, so that a client repeating a token costs one review; joins concurrent checks
// of one token into one review; and bounds the reviews it asks for, per client and in all, so
// that a flood of made-up tokens from one client can neither flood the API server through it nor
// take the turns of other clients (a Budget, which the metrics guard also puts on the
// SubjectAccessReviews it asks for).
package tokenreview

import (
	"context"
	"crypto/sha256"
	"errors"
	"net"
	"net/http"
	"slices"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrTooMany is Review's answer when the client, or all clients together, asked for more reviews
// than their budget: the caller answers 429.
var ErrTooMany = errors.New("too many tokens wait to be checked; retry later")

// Options set a Reviewer's cache and budgets.
type Options struct {
	// GoodTTL and BadTTL are how long a token the API server authenticated, or refused, is
	// remembered.
	GoodTTL, BadTTL time.Duration
	// Size bounds how many tokens are remembered, good and bad together.
	Size int
	// QPS bounds the reviews of all clients together, zero meaning no bound; a review waits up
	// to Wait for its turn, then up to Timeout (zero: 10 s) for the API server's answer.
	QPS           float64
	Wait, Timeout time.Duration
	// ClientQPS and ClientBurst bound the reviews of one client (a remote address); a review
	// past them is refused at once, without waiting. Zero ClientQPS means no such bound.
	ClientQPS   float64
	ClientBurst int
}

// Client is the client a request comes from, for its budget: its address, without the port.
func Client(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// clientIdle is how long a client's budget is kept after its last review.
const clientIdle = time.Minute

// Reviewer reviews bearer tokens with the API server.
type Reviewer struct {
	client  client.Client
	opts    Options
	answers *utilcache.LRUExpireCache // sha256 of audience and token -> *authenticationv1.UserInfo, nil when refused
	budget  *Budget
	checks  singleflight.Group
}

// New returns a Reviewer that asks the API server with c, which may create TokenReviews.
func New(c client.Client, opts Options) *Reviewer {
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	return &Reviewer{client: c, opts: opts, answers: utilcache.NewLRUExpireCache(opts.Size), budget: NewBudget(opts)}
}

// Budget bounds the reviews that clients cost the API server, as Options say: each client its
// own, refused at once past it, and all together, waited for.
type Budget struct {
	opts    Options
	clients *utilcache.LRUExpireCache // client -> *rate.Limiter
	all     *rate.Limiter
}

// NewBudget returns the budget of opts' QPS, Wait, ClientQPS and ClientBurst; Size bounds how
// many clients it remembers.
func NewBudget(opts Options) *Budget {
	return &Budget{opts: opts, clients: utilcache.NewLRUExpireCache(opts.Size), all: rate.NewLimiter(limit(opts.QPS), max(1, int(opts.QPS)))}
}

// ClientMay takes one review from the client's budget, if it has one left.
func (b *Budget) ClientMay(from string) bool {
	if b.opts.ClientQPS == 0 {
		return true
	}
	l, ok := b.clients.Get(from)
	if !ok {
		l = rate.NewLimiter(rate.Limit(b.opts.ClientQPS), max(1, b.opts.ClientBurst))
	}
	b.clients.Add(from, l, clientIdle)
	return l.(*rate.Limiter).Allow()
}

// Wait waits up to Wait for a review's turn among all clients': ErrTooMany when it does not come.
func (b *Budget) Wait(ctx context.Context) error {
	wait, cancel := context.WithTimeout(ctx, b.opts.Wait)
	defer cancel()
	if err := b.all.Wait(wait); err != nil {
		return ErrTooMany
	}
	return nil
}

// limit is a rate of qps, or no bound for zero.
func limit(qps float64) rate.Limit {
	if qps == 0 {
		return rate.Inf
	}
	return rate.Limit(qps)
}

// Review returns the user the API server says the token is, for the audience ("" for the API
// server's own audiences), or nil when it does not authenticate it for that audience. from names
// the client, for its budget.
func (r *Reviewer) Review(ctx context.Context, from, token, audience string) (*authenticationv1.UserInfo, error) {
	key := sha256.Sum256([]byte(audience + "\x00" + token))
	if user, ok := r.answers.Get(key); ok {
		return user.(*authenticationv1.UserInfo), nil
	}
	if !r.budget.ClientMay(from) {
		return nil, ErrTooMany
	}
	// The callers of one token share its review, which runs on a context of its own: the
	// first caller going away must not fail the others.
	shared := context.WithoutCancel(ctx)
	answer := r.checks.DoChan(string(key[:]), func() (any, error) {
		if err := r.budget.Wait(shared); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(shared, r.opts.Timeout)
		defer cancel()
		review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
		if audience != "" {
			review.Spec.Audiences = []string{audience}
		}
		if err := r.client.Create(ctx, review); err != nil {
			return nil, err
		}
		st := review.Status
		if !st.Authenticated || (audience != "" && !slices.Contains(st.Audiences, audience)) {
			r.answers.Add(key, (*authenticationv1.UserInfo)(nil), r.opts.BadTTL)
			return (*authenticationv1.UserInfo)(nil), nil
		}
		r.answers.Add(key, &st.User, r.opts.GoodTTL)
		return &st.User, nil
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case res := <-answer:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(*authenticationv1.UserInfo), nil
	}
}
