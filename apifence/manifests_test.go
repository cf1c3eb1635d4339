package apifence

import (
	"slices"
	"strings"
	"testing"
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
