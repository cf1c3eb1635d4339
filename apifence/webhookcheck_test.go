package apifence

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// TestWebhookProblem: what the leader's registration check finds, against
// an apiserver's answers (the real apiservers' case is testRegistrationCheck
// in lab/kube/apifence).
func TestWebhookProblem(t *testing.T) {
	ignore, fail := admv1.Ignore, admv1.Fail
	reg := func(name string, fp *admv1.FailurePolicyType) *admv1.ValidatingWebhookConfiguration {
		return &admv1.ValidatingWebhookConfiguration{Webhooks: []admv1.ValidatingWebhook{{Name: name, FailurePolicy: fp}}}
	}
	status := func(code int, reason string) string {
		return `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"` + reason + `","code":` + map[int]string{403: "403", 404: "404", 500: "500"}[code] + `}`
	}
	for _, tc := range []struct {
		name      string
		code      int
		body      any
		want      string // substring of the problem; "" none
		wantKnown bool
	}{
		{"in force", 200, reg(WebhookName, &fail), "", true},
		{"failurePolicy defaulted", 200, reg(WebhookName, nil), "", true},
		{"missing", 404, status(404, "NotFound"), "is missing", true},
		{"failurePolicy Ignore", 200, reg(WebhookName, &ignore), "failurePolicy Ignore", true},
		{"another webhook only", 200, reg("other.example.com", &fail), "has no webhook " + WebhookName, true},
		{"RBAC from before the check", 403, status(403, "Forbidden"), "cannot be read (forbidden", true},
		{"apiserver error", 500, status(500, "InternalError"), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != webhookConfigPath {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.code)
				if s, ok := tc.body.(string); ok {
					_, _ = w.Write([]byte(s))
					return
				}
				_ = json.NewEncoder(w).Encode(tc.body)
			}))
			defer srv.Close()
			api, err := kubeapi.New(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
			if err != nil {
				t.Fatal(err)
			}
			problem, err := WebhookProblem(context.Background(), api)
			if known := err == nil; known != tc.wantKnown || (tc.want == "") != (problem == "") || !strings.Contains(problem, tc.want) {
				t.Errorf("WebhookProblem = %q, %v; want %q, %v", problem, known, tc.want, tc.wantKnown)
			}
		})
	}
}
