package apifence

// The token rule as a validating admission webhook that the supervisor
// serves, for clusters older than 1.30 (no ValidatingAdmissionPolicy). The
// rule is the policy's: CREATE, UPDATE (PATCH arrives as UPDATE) and
// DELETE, subresources included, by a managed user are denied unless the
// user extra kha.io/fencing-token is exactly [the current token]; no
// current token (parameter missing, empty or unreadable) denies; other
// users and CONNECT are unaffected.
//
// The current token is the parameter ConfigMap, read with a quorum read on
// each fenced request, never this node's own view of the election: a
// paused node's supervisor resumes believing its old term and would admit
// it, and a node of another group has a term of its own. See
// docs/architecture.md, "The webhook for clusters older than 1.30".

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// WebhookPath is where the webhook answers AdmissionReviews.
const WebhookPath = "/validate"

// TokenSource gives the current token; 0 with a nil error means the
// parameter holds none.
type TokenSource interface {
	Current(ctx context.Context) (int64, error)
}

// Fenced reports whether req is one the rule judges: a write by a managed
// user. The others are admitted without reading the token.
func Fenced(req *admissionv1.AdmissionRequest) bool {
	switch req.Operation {
	case admissionv1.Create, admissionv1.Update, admissionv1.Delete:
	default:
		return false
	}
	return slices.Contains(managedUsers, req.UserInfo.Username)
}

var managedUsers = ManagedUsers()

// Verdict is the rule for a fenced request, given the current token (or
// the error reading it).
func Verdict(req *admissionv1.AdmissionRequest, current int64, srcErr error) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID}
	switch got := req.UserInfo.Extra[gate.TokenExtra]; {
	case srcErr != nil:
		resp.Result = denial(fmt.Sprintf("%s (cannot read the current fencing token: %v)", PolicyMessage, srcErr))
	case current <= 0:
		resp.Result = denial(PolicyMessage + " (the parameter " + Namespace + "/" + ParamName + " holds no token yet)")
	case len(got) == 1 && got[0] == strconv.FormatInt(current, 10):
		resp.Allowed = true
	default:
		resp.Result = denial(PolicyMessage)
	}
	return resp
}

// denial is 422 Invalid, as the policy's refusal, so that IsPolicyDenial
// and the components see the same answer from either.
func denial(msg string) *metav1.Status {
	return &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Message: msg}
}

// Review answers one AdmissionReview.
func Review(ctx context.Context, in *admissionv1.AdmissionReview, src TokenSource) *admissionv1.AdmissionReview {
	out := &admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}}
	req := in.Request
	if req == nil {
		out.Response = &admissionv1.AdmissionResponse{Result: denial("AdmissionReview without a request")}
		return out
	}
	if !Fenced(req) {
		out.Response = &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
		return out
	}
	cur, err := src.Current(ctx)
	out.Response = Verdict(req, cur, err)
	return out
}

// ParamSource reads the parameter from the apiservers with a quorum read
// (a GET without resourceVersion is served from etcd, not a cache), so
// that a request is judged against the token as it is when it arrives.
type ParamSource struct {
	API *kubeapi.Client // the supervisor's credential, through failover
}

// Current returns the parameter's token; a missing parameter is an error.
func (p ParamSource) Current(ctx context.Context) (int64, error) {
	cm, err := getParam(ctx, p.API)
	if apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("the parameter %s/%s is missing", Namespace, ParamName)
	}
	if err != nil {
		return 0, err
	}
	return HeldToken(cm)
}

// maxReview bounds an AdmissionReview's body: the object and the old
// object, each at most etcd's 1.5 MiB, and their envelope.
const maxReview = 8 << 20

// WebhookCounts are what the webhook decided since it started.
type WebhookCounts struct {
	Admitted, Denied, Unfenced int64
}

// Webhook is the running webhook server.
type Webhook struct {
	src TokenSource
	log *slog.Logger
	ln  net.Listener
	srv *http.Server

	admitted, denied, unfenced atomic.Int64
}

// ListenWebhook binds addr (loopback: each apiserver calls the webhook of
// its own node) with the local CA's serving certificate.
func ListenWebhook(addr string, serving tls.Certificate, src TokenSource, log *slog.Logger) (*Webhook, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || (host != "localhost" && !isLoopbackIP(host)) {
		return nil, fmt.Errorf("api fence webhook: listen %q must be a loopback host:port", addr)
	}
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("api fence webhook: %w", err)
	}
	w := &Webhook{src: src, log: log.With("component", "api-fence-webhook"), ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+WebhookPath, w.handle)
	w.srv = &http.Server{
		Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:  slog.NewLogLogger(w.log.Handler(), slog.LevelDebug),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{serving}, MinVersion: tls.VersionTLS12},
	}
	return w, nil
}

func isLoopbackIP(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Addr is the bound address.
func (w *Webhook) Addr() string { return w.ln.Addr().String() }

// URL is what the ValidatingWebhookConfiguration names.
func (w *Webhook) URL() string { return "https://" + w.Addr() + WebhookPath }

// Serve answers until Close; nil after Close.
func (w *Webhook) Serve() error {
	err := w.srv.ServeTLS(w.ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops the server.
func (w *Webhook) Close() error { return w.srv.Close() }

// Counts are the decisions so far.
func (w *Webhook) Counts() WebhookCounts {
	return WebhookCounts{Admitted: w.admitted.Load(), Denied: w.denied.Load(), Unfenced: w.unfenced.Load()}
}

func (w *Webhook) handle(rw http.ResponseWriter, r *http.Request) {
	var in admissionv1.AdmissionReview
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReview+1))
	if err == nil && len(body) > maxReview {
		err = errors.New("too large")
	}
	if err == nil {
		err = json.Unmarshal(body, &in)
	}
	if err != nil {
		http.Error(rw, "kha-supervisor webhook: not an AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	// The apiserver waits timeoutSeconds at most; the read gets less.
	ctx, cancel := context.WithTimeout(r.Context(), 4*time.Second)
	defer cancel()
	out := Review(ctx, &in, w.src)
	w.count(in.Request, out.Response)
	b, err := json.Marshal(out)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	_, _ = rw.Write(b)
}

func (w *Webhook) count(req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) {
	switch {
	case req == nil || (resp.Allowed && !Fenced(req)):
		w.unfenced.Add(1)
	case resp.Allowed:
		w.admitted.Add(1)
	default:
		w.denied.Add(1)
		w.log.Debug("refused a write without the current fencing token", "user", req.UserInfo.Username,
			"operation", req.Operation, "resource", req.Resource.Resource, "subresource", req.SubResource,
			"namespace", req.Namespace, "name", req.Name, "reason", resp.Result.Message)
	}
}
