package gate

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// User is an authenticated component.
type User struct {
	Name   string
	Groups []string
}

// Reviewer checks a bearer token.
type Reviewer interface {
	Review(ctx context.Context, token string) (User, error)
}

// authenticate does what the apiserver's authenticators do for the two
// credentials a component uses: a client certificate (already verified
// against the cluster CA by the TLS handshake: CN is the user, O the
// groups), or a bearer token (TokenReview). Anything else is refused; the
// gate never forwards anonymously.
func (g *Gate) authenticate(r *http.Request) (User, error) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		leaf := r.TLS.VerifiedChains[0][0]
		if leaf.Subject.CommonName == "" {
			return User{}, errors.New("client certificate without a common name")
		}
		return trimGroups(User{Name: leaf.Subject.CommonName, Groups: leaf.Subject.Organization}), nil
	}
	auth := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		return User{}, errors.New("no client certificate and no bearer token")
	}
	u, err := g.review.Review(r.Context(), strings.TrimSpace(token))
	if err != nil {
		return User{}, err
	}
	return trimGroups(u), nil
}

// trimGroups drops the groups the apiserver adds by itself to an
// impersonated user (system:authenticated always; a service account's two
// groups when no group is named), so the supervisor need not be allowed to
// impersonate them.
func trimGroups(u User) User {
	var keep []string
	ns, isSA := saNamespace(u.Name)
	for _, g := range u.Groups {
		switch {
		case g == "system:authenticated":
		case isSA && (g == "system:serviceaccounts" || g == "system:serviceaccounts:"+ns):
		default:
			keep = append(keep, g)
		}
	}
	u.Groups = keep
	return u
}

func saNamespace(user string) (string, bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return "", false
	}
	ns, _, ok := strings.Cut(rest, ":")
	return ns, ok
}

// tokenReviewer asks the apiserver and caches answers briefly: a
// component's token is sent on every request, a review on each would
// double the apiserver's work.
type tokenReviewer struct {
	api    *kubeapi.Client
	ttl    time.Duration
	negTTL time.Duration

	mu    sync.Mutex
	cache map[[32]byte]cached
}

type cached struct {
	user    User
	err     error
	expires time.Time
}

// NewTokenReviewer builds a TokenReview client under cfg (the supervisor's
// credential; it needs create on tokenreviews, as system:auth-delegator
// grants). Answers are cached 10 s, refusals 1 s.
func NewTokenReviewer(cfg *rest.Config) (Reviewer, error) {
	api, err := kubeapi.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("token review client: %w", err)
	}
	return newTokenReviewer(api), nil
}

func newTokenReviewer(api *kubeapi.Client) *tokenReviewer {
	return &tokenReviewer{api: api, ttl: 10 * time.Second, negTTL: time.Second, cache: map[[32]byte]cached{}}
}

func (t *tokenReviewer) Review(ctx context.Context, token string) (User, error) {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	t.mu.Lock()
	c, ok := t.cache[key]
	t.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.user, c.err
	}
	u, err, final := t.ask(ctx, token)
	if !final {
		return u, err // transport trouble: not cached
	}
	ttl := t.ttl
	if err != nil {
		ttl = t.negTTL
	}
	t.mu.Lock()
	if len(t.cache) > 1024 {
		clear(t.cache)
	}
	t.cache[key] = cached{user: u, err: err, expires: now.Add(ttl)}
	t.mu.Unlock()
	return u, err
}

// ask returns final=false when the apiserver could not answer.
func (t *tokenReviewer) ask(ctx context.Context, token string) (User, error, bool) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	in := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}
	in.APIVersion, in.Kind = "authentication.k8s.io/v1", "TokenReview"
	res := &authnv1.TokenReview{}
	if err := t.api.Do(rctx, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", nil, in, res); err != nil {
		return User{}, fmt.Errorf("token review: %w", err), false
	}
	if !res.Status.Authenticated {
		return User{}, fmt.Errorf("token review: not authenticated: %s", res.Status.Error), true
	}
	return User{Name: res.Status.User.Username, Groups: res.Status.User.Groups}, nil, true
}
