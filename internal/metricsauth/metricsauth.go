// Package metricsauth guards the manager's metrics endpoint: a request must be a GET or a HEAD,
// carry a bearer token that the API server authenticates (a TokenReview), and the token's user
// must be allowed the request's verb on its path (a SubjectAccessReview: the metrics-reader
// ClusterRole grants `get` on `/metrics`). The reviews a client makes the guard ask for, of
// either kind, are bounded as the progress endpoint's are (tokenreview.Budget), so that a pod
// varying its token, path or verb cannot flood the API server through the manager. It does what controller-runtime's filters.WithAuthenticationAndAuthorization
// does, with the same answers and cache lifetimes, without linking k8s.io/apiserver: that
// library's authenticators and authorizers made up 29 MB of the manager's 77 MB executable, and
// the executable's pages are a third of the manager's memory (docs/performance.md).
package metricsauth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trainjob/operator/internal/tokenreview"
)

// Reviews are the token reviews of the metrics guard: an answer, good or bad, is remembered for a
// minute, as controller-runtime's filter does; the budgets are the progress endpoint's, and its
// SubjectAccessReviews have budgets of their own, the same.
var Reviews = tokenreview.Options{
	GoodTTL: time.Minute, BadTTL: time.Minute, Size: cacheSize,
	QPS: 100, Wait: reviewTimeout, Timeout: reviewTimeout,
	ClientQPS: 5, ClientBurst: 10,
}

const (
	// allowTTL and denyTTL are how long a user's access to a path is remembered.
	allowTTL = 5 * time.Minute
	denyTTL  = 30 * time.Second
	// reviewTimeout bounds each review the API server is asked for.
	reviewTimeout = 10 * time.Second
	// cacheSize bounds how many tokens, and how many decisions, are remembered.
	cacheSize = 1024
)

// Filter is a metricsserver.FilterProvider: it reviews with the manager's own configuration,
// whose service account the install lets create TokenReviews and SubjectAccessReviews.
func Filter(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	c, err := client.New(cfg, client.Options{HTTPClient: httpClient})
	if err != nil {
		return nil, err
	}
	g := &guard{client: c, tokens: tokenreview.New(c, Reviews), decisions: utilcache.NewLRUExpireCache(cacheSize),
		accessReviews: tokenreview.NewBudget(Reviews)}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serve(log, next, w, r) }), nil
	}, nil
}

type guard struct {
	client client.Client
	tokens *tokenreview.Reviewer
	// decisions maps a user, verb and path to whether the user is allowed.
	decisions *utilcache.LRUExpireCache
	// accessReviews bounds the SubjectAccessReviews asked for.
	accessReviews *tokenreview.Budget
}

// decision is a remembered SubjectAccessReview.
type decision struct {
	allowed bool
	reason  string
}

func (g *guard) serve(log logr.Logger, next http.Handler, w http.ResponseWriter, r *http.Request) {
	// Metrics are read, never written: no other method costs a review.
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "Method not allowed", http.StatusMethodNotAllowed)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), reviewTimeout)
	defer cancel()
	user, err := g.authenticate(ctx, r)
	if errors.Is(err, tokenreview.ErrTooMany) {
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	if err != nil {
		log.Error(err, "Authentication failed")
		http.Error(w, "Authentication failed", http.StatusInternalServerError)
		return
	}
	if user == nil {
		log.V(4).Info("Authentication failed")
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	verb := strings.ToLower(r.Method)
	d, err := g.authorize(ctx, tokenreview.Client(r), user, verb, r.URL.Path)
	if errors.Is(err, tokenreview.ErrTooMany) {
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	if err != nil {
		msg := fmt.Sprintf("Authorization for user %s failed", user.Username)
		log.Error(err, msg)
		http.Error(w, msg, http.StatusInternalServerError)
		return
	}
	if !d.allowed {
		msg := fmt.Sprintf("Authorization denied for user %s", user.Username)
		log.V(4).Info(msg+": "+d.reason, "verb", verb, "path", r.URL.Path)
		http.Error(w, msg, http.StatusForbidden)
		return
	}
	next.ServeHTTP(w, r)
}

// authenticate returns the user of the request's bearer token, or nil when it has none or the
// API server does not know it.
func (g *guard) authenticate(ctx context.Context, r *http.Request) (*authenticationv1.UserInfo, error) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, nil
	}
	return g.tokens.Review(ctx, tokenreview.Client(r), token, "")
}

// authorize asks whether the user may use verb on path, if the client from which the request
// came has a review left in its budget.
func (g *guard) authorize(ctx context.Context, from string, user *authenticationv1.UserInfo, verb, path string) (decision, error) {
	spec := authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}
	if len(user.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	// The whole question is the key: users, groups and paths are not trusted to be free of any
	// separator.
	data, err := json.Marshal(spec)
	if err != nil {
		return decision{}, err
	}
	key := sha256.Sum256(data)
	if d, ok := g.decisions.Get(key); ok {
		return d.(decision), nil
	}
	if !g.accessReviews.ClientMay(from) {
		return decision{}, tokenreview.ErrTooMany
	}
	if err := g.accessReviews.Wait(ctx); err != nil {
		return decision{}, err
	}
	review := &authorizationv1.SubjectAccessReview{Spec: spec}
	if err := g.client.Create(ctx, review); err != nil {
		return decision{}, err
	}
	d := decision{allowed: review.Status.Allowed, reason: review.Status.Reason}
	ttl := denyTTL
	if d.allowed {
		ttl = allowTTL
	}
	g.decisions.Add(key, d, ttl)
	return d, nil
}
