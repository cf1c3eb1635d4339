package apifence

import (
	"slices"
	"strings"
	"testing"

	flowv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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

// The gate forwards a component certificate's O field as impersonated
// groups; without a grant every such request is refused (403).
func TestClusterRoleLetsTheGateImpersonateTheComponentsGroups(t *testing.T) {
	m := Build(ManifestOptions{})
	for _, g := range ComponentUsers {
		if !grants(m.ClusterRole.Rules, "", "groups", "impersonate", g) {
			t.Errorf("ClusterRole %s grants no impersonation of group %s (a certificate with O=%s gets 403 through the gate)", RoleName, g, g)
		}
	}
	if grants(m.ClusterRole.Rules, "", "groups", "impersonate", "system:masters") {
		t.Error("ClusterRole lets the supervisor impersonate system:masters")
	}
}

func grants(rules []rbacv1.PolicyRule, group, resource, verb, name string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) &&
			(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

// The confirmation's probes are dry-run event creates in kube-system
// impersonating the scheduler: API Priority and Fairness classifies them
// by the impersonated user (its filter runs after impersonation), so the
// FlowSchema must match that user and that request, and the supervisor's
// own user for its parameter reads and writes and the gates' TokenReviews.
func TestManifestsShipAFlowSchemaForTheSupervisorsRequests(t *testing.T) {
	m := Build(ManifestOptions{SupervisorUsers: []string{"kha-m1"}})
	objs := m.Objects()
	var fs *flowv1.FlowSchema
	var plc *flowv1.PriorityLevelConfiguration
	for _, o := range objs {
		switch o := o.(type) {
		case *flowv1.FlowSchema:
			fs = o
		case *flowv1.PriorityLevelConfiguration:
			plc = o
		}
	}
	if fs == nil || plc == nil {
		t.Fatalf("manifests hold no FlowSchema (%v) or PriorityLevelConfiguration (%v)", fs != nil, plc != nil)
	}
	if fs.Spec.PriorityLevelConfiguration.Name != plc.Name {
		t.Errorf("FlowSchema points at %q, the level is %q", fs.Spec.PriorityLevelConfiguration.Name, plc.Name)
	}
	// Below the default kube-scheduler (800) and system-leader-election (100)
	// schemas: the lowest precedence wins.
	if p := fs.Spec.MatchingPrecedence; p <= 2 || p >= 100 {
		t.Errorf("matchingPrecedence %d, want between the built-in probes (2) and system-leader-election (100)", p)
	}
	if plc.Spec.Type != flowv1.PriorityLevelEnablementLimited || plc.Spec.Limited == nil || plc.Spec.Limited.LendablePercent == nil || *plc.Spec.Limited.LendablePercent != 0 {
		t.Errorf("priority level %+v, want Limited with lendablePercent 0 (its seats are never lent away)", plc.Spec)
	}
	var probe, own bool
	for _, r := range fs.Spec.Rules {
		for _, s := range r.Subjects {
			for _, rr := range r.ResourceRules {
				if s.Kind == flowv1.SubjectKindUser && s.User.Name == ProbeUser && slices.Contains(rr.Verbs, "create") &&
					slices.Contains(rr.Resources, "events") && slices.Contains(rr.Namespaces, Namespace) {
					probe = true
				}
				if s.Kind == flowv1.SubjectKindUser && s.User.Name == "kha-m1" && (slices.Contains(rr.Resources, "configmaps") || slices.Contains(rr.Resources, "*")) {
					own = true
				}
			}
		}
	}
	if !probe || !own {
		t.Errorf("FlowSchema rules %+v: probe events matched %v, the supervisor's own requests matched %v", fs.Spec.Rules, probe, own)
	}
	// Before the policies: a promotion during the install must not wait
	// in a saturated level.
	if i, j := slices.Index(objs, any(fs)), slices.Index(objs, any(m.Binding)); i > j {
		t.Errorf("FlowSchema at %d after the policy binding at %d", i, j)
	}
	wh := BuildWebhook(WebhookOptions{})
	if !slices.ContainsFunc(wh, func(o any) bool { _, ok := o.(*flowv1.FlowSchema); return ok }) {
		t.Error("the webhook variant ships no FlowSchema")
	}
}
