package apifence

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/apifence/localca"
	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// fixedToken is a TokenSource for the decision's unit tests.
type fixedToken struct {
	token int64
	err   error
	reads atomic.Int64
}

func (f *fixedToken) Current(context.Context) (int64, error) { f.reads.Add(1); return f.token, f.err }

func request(user string, op admissionv1.Operation, resource, sub string, token ...string) *admissionv1.AdmissionReview {
	ui := authnv1.UserInfo{Username: user}
	if token != nil {
		ui.Extra = map[string]authnv1.ExtraValue{gate.TokenExtra: token}
	}
	return &admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{
		UID: types.UID("uid-" + user), Operation: op, UserInfo: ui,
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: resource}, SubResource: sub,
	}}
}

// TestWebhookVerdicts: the policy's rule, AdmissionReview in, verdict out.
func TestWebhookVerdicts(t *testing.T) {
	const sched, cm = "system:kube-scheduler", "system:kube-controller-manager"
	rs := "system:serviceaccount:kube-system:replicaset-controller"
	cases := []struct {
		name    string
		review  *admissionv1.AdmissionReview
		src     *fixedToken
		allowed bool
		read    bool // the token was read (only for fenced requests)
		msg     string
	}{
		{"current token admitted", request(sched, admissionv1.Create, "pods", "binding", "101"), &fixedToken{token: 101}, true, true, ""},
		{"stale token refused", request(sched, admissionv1.Create, "pods", "binding", "100"), &fixedToken{token: 101}, false, true, "does not carry the current fencing token"},
		{"newer token refused", request(sched, admissionv1.Update, "pods", "status", "102"), &fixedToken{token: 101}, false, true, "does not carry"},
		{"no token refused", request(cm, admissionv1.Delete, "pods", ""), &fixedToken{token: 101}, false, true, "does not carry"},
		{"empty extra refused", request(cm, admissionv1.Update, "nodes", "status", []string{}...), &fixedToken{token: 101}, false, true, "does not carry"},
		{"two values refused", request(cm, admissionv1.Update, "nodes", "", "101", "100"), &fixedToken{token: 101}, false, true, "does not carry"},
		{"controller's service account fenced", request(rs, admissionv1.Create, "pods", "", "100"), &fixedToken{token: 101}, false, true, "does not carry"},
		{"controller's service account admitted", request(rs, admissionv1.Create, "pods", "", "101"), &fixedToken{token: 101}, true, true, ""},
		{"no token held refuses even a matching 0", request(sched, admissionv1.Create, "events", "", "0"), &fixedToken{token: 0}, false, true, "holds no token yet"},
		{"parameter unreadable refuses", request(sched, admissionv1.Create, "events", "", "101"), &fixedToken{err: errors.New("the parameter kube-system/kha-fencing-token is missing")}, false, true, "is missing"},
		{"other user unaffected", request("admin", admissionv1.Delete, "pods", "", "1"), &fixedToken{err: errors.New("must not be read")}, true, false, ""},
		{"other service account unaffected", request("system:serviceaccount:kube-system:coredns", admissionv1.Update, "endpoints", ""), &fixedToken{token: 101}, true, false, ""},
		{"connect unaffected", request(sched, admissionv1.Connect, "pods", "exec"), &fixedToken{token: 101}, true, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := Review(t.Context(), c.review, c.src)
			r := out.Response
			if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" {
				t.Errorf("answer is %s %s, want admission.k8s.io/v1 AdmissionReview", out.APIVersion, out.Kind)
			}
			if r.UID != c.review.Request.UID {
				t.Errorf("uid %q, want the request's %q", r.UID, c.review.Request.UID)
			}
			if r.Allowed != c.allowed {
				t.Errorf("allowed %v, want %v (result %+v)", r.Allowed, c.allowed, r.Result)
			}
			if read := c.src.reads.Load() > 0; read != c.read {
				t.Errorf("token read %v, want %v", read, c.read)
			}
			if !c.allowed {
				if r.Result == nil || r.Result.Code != http.StatusUnprocessableEntity || r.Result.Reason != metav1.StatusReasonInvalid || !strings.Contains(r.Result.Message, c.msg) {
					t.Errorf("result %+v, want 422 Invalid with %q", r.Result, c.msg)
				}
			}
		})
	}
	if out := Review(t.Context(), &admissionv1.AdmissionReview{}, &fixedToken{token: 1}); out.Response == nil || out.Response.Allowed {
		t.Errorf("a review without a request: %+v, want refused", out.Response)
	}
}

// TestWebhookServesAdmissionReviewsOverTLS: the server, with the local
// CA's certificate, answers JSON AdmissionReviews as the apiserver sends
// them, and refuses what is not one.
func TestWebhookServesAdmissionReviewsOverTLS(t *testing.T) {
	ca, err := localca.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Serving("webhook")
	if err != nil {
		t.Fatal(err)
	}
	src := &fixedToken{token: 7}
	w, err := ListenWebhook("127.0.0.1:0", serving, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.Serve() }()
	defer w.Close()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	send := func(rv *admissionv1.AdmissionReview) *admissionv1.AdmissionResponse {
		t.Helper()
		b, _ := json.Marshal(rv)
		resp, err := hc.Post(w.URL(), "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil {
			t.Fatalf("answer: %v %+v", err, out)
		}
		return out.Response
	}
	if r := send(request("system:kube-scheduler", admissionv1.Create, "pods", "binding", "7")); !r.Allowed {
		t.Errorf("current token: %+v", r.Result)
	}
	if r := send(request("system:kube-scheduler", admissionv1.Create, "pods", "binding", "6")); r.Allowed {
		t.Error("stale token admitted over HTTP")
	}
	if r := send(request("admin", admissionv1.Create, "pods", "")); !r.Allowed {
		t.Errorf("admin: %+v", r.Result)
	}
	if c := w.Counts(); c != (WebhookCounts{Admitted: 1, Denied: 1, Unfenced: 1}) {
		t.Errorf("counts %+v", c)
	}
	resp, err := hc.Post(w.URL(), "application/json", strings.NewReader("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("garbage: %d, want 400", resp.StatusCode)
	}
	if _, err := ListenWebhook("0.0.0.0:0", serving, src, nil); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("a non-loopback listen address: %v, want refused", err)
	}
}

func TestBuildWebhookShape(t *testing.T) {
	objs := BuildWebhook(WebhookOptions{CABundle: []byte("PEM")})
	cfg, ok := objs[len(objs)-1].(*admv1.ValidatingWebhookConfiguration)
	if !ok {
		t.Fatalf("last object %T, want the ValidatingWebhookConfiguration", objs[len(objs)-1])
	}
	wh := cfg.Webhooks[0]
	switch {
	case *wh.FailurePolicy != admv1.Fail:
		t.Errorf("failurePolicy %s, want Fail", *wh.FailurePolicy)
	case *wh.SideEffects != admv1.SideEffectClassNone:
		t.Errorf("sideEffects %s: dry-run probes would be refused", *wh.SideEffects)
	case *wh.ClientConfig.URL != DefaultWebhookURL || string(wh.ClientConfig.CABundle) != "PEM":
		t.Errorf("client config %+v", wh.ClientConfig)
	case len(wh.Rules) != 1 || len(wh.Rules[0].Resources) != 1 || wh.Rules[0].Resources[0] != "*/*":
		t.Errorf("rules %+v, want */*", wh.Rules)
	case !strings.Contains(wh.MatchConditions[0].Expression, `"system:kube-scheduler"`):
		t.Errorf("match condition %q", wh.MatchConditions[0].Expression)
	case !strings.Contains(wh.Name, PolicyName):
		t.Errorf("webhook name %q must contain %q (IsPolicyDenial)", wh.Name, PolicyName)
	}
	if _, ok := objs[len(objs)-2].(*kubeapi.ConfigMap); !ok {
		t.Errorf("the parameter is not before the webhook: %T", objs[len(objs)-2])
	}
}
