package apifence

import (
	"slices"
	"strings"
	"testing"

	admv1 "k8s.io/api/admissionregistration/v1"
)

func TestBuildParamHoldsNoTokenUntilOneIsGiven(t *testing.T) {
	if m := Build(ManifestOptions{}); len(m.Param.Data) != 0 {
		t.Errorf("initial parameter %v, want no token (a literal 0 would admit writes carrying 0)", m.Param.Data)
	}
	if m := Build(ManifestOptions{Token: 57}); m.Param.Data["token"] != "57" {
		t.Errorf("parameter %v, want token 57", m.Param.Data)
	}
}

func TestBuildPolicyShape(t *testing.T) {
	m := Build(ManifestOptions{SupervisorUsers: []string{"kha-m1"}})
	rules := m.Policy.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"*/*"}) {
		t.Errorf("resource rules %+v, want */* alone", rules)
	}
	if a := m.Binding.Spec.ParamRef.ParameterNotFoundAction; a == nil || *a != "Deny" {
		t.Errorf("parameterNotFoundAction %v, want Deny", a)
	}
	if !strings.HasPrefix(TokenExpression, "has(request.userInfo.extra) && ") {
		t.Errorf("expression %q does not guard a missing extra first", TokenExpression)
	}
	cond := m.Policy.Spec.MatchConditions[0].Expression
	for _, u := range []string{"system:kube-scheduler", "system:kube-controller-manager", "system:serviceaccount:kube-system:replicaset-controller"} {
		if !strings.Contains(cond, `"`+u+`"`) {
			t.Errorf("match condition does not name %s", u)
		}
	}
	if strings.Contains(cond, `"system:serviceaccount:kube-system:coredns"`) {
		t.Error("match condition fences a kube-system account that is not the controller-manager's")
	}
	if !strings.Contains(m.Guard.Spec.Validations[0].Expression, `"kha-m1"`) {
		t.Errorf("guard %q does not admit the supervisor user", m.Guard.Spec.Validations[0].Expression)
	}
}

// Token mode's manifests register the webhook beside the policy, last (it
// must be served before it is registered, and it refuses what the policy
// refuses), with the policy's users and failurePolicy Fail.
func TestBuildTokenModeRegistersTheWebhook(t *testing.T) {
	if m := Build(ManifestOptions{}); m.Webhook != nil || slices.ContainsFunc(m.Objects(), func(o any) bool { _, ok := o.(*admv1.ValidatingWebhookConfiguration); return ok }) {
		t.Fatal("a webhook registration without a CA bundle")
	}
	m := Build(ManifestOptions{Webhook: WebhookClient{CABundle: []byte("PEM")}})
	objs := m.Objects()
	vwc, ok := objs[len(objs)-1].(*admv1.ValidatingWebhookConfiguration)
	if !ok || vwc != m.Webhook {
		t.Fatalf("last object %T, want the webhook's registration", objs[len(objs)-1])
	}
	w := vwc.Webhooks[0]
	if *w.ClientConfig.URL != DefaultWebhookURL || string(w.ClientConfig.CABundle) != "PEM" || *w.FailurePolicy != admv1.Fail || w.Name != WebhookName {
		t.Errorf("webhook %+v", w)
	}
	if w.MatchConditions[0].Expression != m.Policy.Spec.MatchConditions[0].Expression {
		t.Errorf("webhook's users %q differ from the policy's", w.MatchConditions[0].Expression)
	}
}
