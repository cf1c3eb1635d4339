// Package apifence is the fence at the API server: per-unit gates
// (apifence/gate) that forward the managed components' requests with this
// term's fencing token, and an admission policy in the apiserver that
// refuses their writes without the current token. This file builds the
// objects an operator installs; publish.go moves the token at promotion.
package apifence

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	admv1 "k8s.io/api/admissionregistration/v1"
	flowv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

const (
	// Namespace and ParamName locate the parameter ConfigMap holding the
	// current token under data.token.
	Namespace = "kube-system"
	ParamName = "kha-fencing-token"
	// PolicyName is the token policy; GuardName the policy that lets only
	// the supervisors change the parameter.
	PolicyName = gate.PolicyName
	GuardName  = "kha-fencing-token-guard"
	// RoleName names the supervisor's RBAC objects.
	RoleName = "kha-supervisor:api-fence"
	// DefaultSupervisorUser is the user of the supervisors' own credential
	// (the CN of their client certificate).
	DefaultSupervisorUser = "kha-supervisor"
)

// ControllerServiceAccounts are the service accounts under kube-system that
// kube-controller-manager uses with --use-service-account-credentials (one
// per controller), from kube-controller-manager v1.37's sources. A name
// that no longer exists costs nothing; a controller missing here would
// write unfenced, so the list errs on the side of more.
var ControllerServiceAccounts = []string{
	"attachdetach-controller", "bootstrap-signer", "certificate-controller", "clusterrole-aggregation-controller",
	"controller-discovery", "cronjob-controller", "daemon-set-controller", "deployment-controller",
	"device-taint-eviction-controller", "disruption-controller", "endpoint-controller", "endpointslice-controller",
	"endpointslicemirroring-controller", "ephemeral-volume-controller", "expand-controller", "generic-garbage-collector",
	"horizontal-pod-autoscaler", "job-controller", "kube-apiserver-serving-clustertrustbundle-publisher",
	"legacy-service-account-token-cleaner", "namespace-controller", "node-controller", "persistent-volume-binder",
	"pod-garbage-collector", "podcertificaterequestcleaner", "podgroup-protection-controller", "pv-protection-controller",
	"pvc-protection-controller", "replicaset-controller", "replication-controller", "resource-claim-controller",
	"resourcepoolstatusrequest-controller", "resourcequota-controller", "root-ca-cert-publisher", "selinux-warning-controller",
	"service-account-controller", "service-cidrs-controller", "service-controller", "shared-informers",
	"statefulset-controller", "storage-version-garbage-collector", "storage-version-migrator-controller",
	"taint-eviction-controller", "token-cleaner", "tokens-controller", "ttl-after-finished-controller", "ttl-controller",
	"validatingadmissionpolicy-status-controller", "volumeattributesclass-protection-controller",
}

// ComponentUsers are the managed components' own users.
var ComponentUsers = []string{"system:kube-scheduler", "system:kube-controller-manager"}

// ManagedUsers is every user the policy fences: the components and the
// controller-manager's per-controller service accounts.
func ManagedUsers() []string {
	out := append([]string(nil), ComponentUsers...)
	for _, sa := range ControllerServiceAccounts {
		out = append(out, "system:serviceaccount:"+Namespace+":"+sa)
	}
	return out
}

// ManifestOptions choose the supervisors' identity.
type ManifestOptions struct {
	SupervisorUsers []string // default [DefaultSupervisorUser]
	Token           int64    // the parameter's initial token; 0 (none) admits no fenced write until a leader publishes
}

// Manifests are the objects to install, in apply order.
type Manifests struct {
	Param         *kubeapi.ConfigMap
	Policy        *admv1.ValidatingAdmissionPolicy
	Binding       *admv1.ValidatingAdmissionPolicyBinding
	Guard         *admv1.ValidatingAdmissionPolicy
	GuardBinding  *admv1.ValidatingAdmissionPolicyBinding
	ClusterRole   *rbacv1.ClusterRole
	ClusterBind   *rbacv1.ClusterRoleBinding
	Role          *rbacv1.Role
	RoleBind      *rbacv1.RoleBinding
	EndpointsRole *rbacv1.Role
	EndpointsBind *rbacv1.RoleBinding
	// Priority and FlowSchema keep the supervisor's requests, and the
	// confirmation's probes, out of the levels a loaded cluster saturates
	// (flowcontrol.go).
	Priority      *flowv1.PriorityLevelConfiguration
	FlowSchema    *flowv1.FlowSchema
	supervisorSet []string
}

// celList renders names as a CEL list literal of strings.
func celList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TokenExpression admits a write only when the request's token extra is
// exactly [param's data.token]. has() and `in` guard a missing extra, a
// missing data or a missing key: each is a denial, not an evaluation error.
var TokenExpression = fmt.Sprintf(`has(request.userInfo.extra) && %q in request.userInfo.extra && `+
	`has(params.data) && 'token' in params.data && request.userInfo.extra[%q] == [params.data.token]`,
	gate.TokenExtra, gate.TokenExtra)

// PolicyMessage is what a refused write reads.
const PolicyMessage = "kha-supervisor: write refused: it does not carry the current fencing token (user extra kha.io/fencing-token); " +
	"it comes from a stale term, another group, or a component that bypassed the supervisor's API gate"

// Build returns the manifests.
func Build(o ManifestOptions) Manifests {
	sup := o.SupervisorUsers
	if len(sup) == 0 {
		sup = []string{DefaultSupervisorUser}
	}
	m := Manifests{supervisorSet: sup}
	m.Param = &kubeapi.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: ParamName, Namespace: Namespace},
	}
	// Token 0 leaves data.token out: the policy then admits no fenced
	// write at all (a literal "0" would admit writes carrying "0").
	if o.Token > 0 {
		m.Param.Data = map[string]string{"token": strconv.FormatInt(o.Token, 10)}
	}
	fail := admv1.Fail
	deny := admv1.DenyAction
	m.Policy = &admv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName},
		Spec: admv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			ParamKind:     &admv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admv1.MatchResources{ResourceRules: []admv1.NamedRuleWithOperations{{
				RuleWithOperations: admv1.RuleWithOperations{
					Operations: []admv1.OperationType{admv1.Create, admv1.Update, admv1.Delete},
					// "*/*" alone: every resource and every subresource
					// (pods/binding, pods/status, ...).
					Rule: admv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}},
				},
			}}},
			MatchConditions: []admv1.MatchCondition{{
				Name:       "managed-component",
				Expression: "request.userInfo.username in " + celList(ManagedUsers()),
			}},
			Validations: []admv1.Validation{{Expression: TokenExpression, Message: PolicyMessage}},
		},
	}
	m.Binding = &admv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName},
		Spec: admv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        PolicyName,
			ValidationActions: []admv1.ValidationAction{admv1.Deny},
			ParamRef:          &admv1.ParamRef{Name: ParamName, Namespace: Namespace, ParameterNotFoundAction: &deny},
		},
	}
	m.Guard = &admv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: GuardName},
		Spec: admv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admv1.MatchResources{ResourceRules: []admv1.NamedRuleWithOperations{{
				ResourceNames: []string{ParamName},
				RuleWithOperations: admv1.RuleWithOperations{
					Operations: []admv1.OperationType{admv1.Create, admv1.Update, admv1.Delete},
					Rule:       admv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			MatchConditions: []admv1.MatchCondition{{Name: "the-parameter", Expression: fmt.Sprintf("request.namespace == %q", Namespace)}},
			Validations: []admv1.Validation{{
				Expression: "request.userInfo.username in " + celList(sup),
				Message:    "kha-supervisor: only the supervisors change the fencing token; delete ValidatingAdmissionPolicyBinding " + GuardName + " first to edit it by hand",
			}},
		},
	}
	m.GuardBinding = &admv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: GuardName},
		Spec:       admv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: GuardName, ValidationActions: []admv1.ValidationAction{admv1.Deny}},
	}
	m.rbac()
	m.flowControl()
	return m
}

func (m *Manifests) rbac() {
	var subjects []rbacv1.Subject
	for _, u := range m.supervisorSet {
		subjects = append(subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: u})
	}
	m.ClusterRole = &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: RoleName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"}, ResourceNames: ComponentUsers},
			// The gates forward a client certificate's O as groups; the
			// components' certificates name their own user as group
			// where they have one (kubernetes-the-hard-way, kops). No
			// other group: system:masters would make this credential
			// cluster-admin. A certificate with another O gets 403.
			{APIGroups: []string{""}, Resources: []string{"groups"}, Verbs: []string{"impersonate"}, ResourceNames: ComponentUsers},
			// Any value: the token changes every term.
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"userextras/" + gate.TokenExtra}, Verbs: []string{"impersonate"}},
			// The gates authenticate bearer tokens as the apiserver would.
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			// The leader's self-check reads the token webhook's
			// registration (webhookcheck.go).
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"get"}, ResourceNames: []string{PolicyName}},
		},
	}
	m.ClusterBind = &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: RoleName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: RoleName},
		Subjects:   subjects,
	}
	m.Role = &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: RoleName, Namespace: Namespace},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"}, ResourceNames: ControllerServiceAccounts},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "update"}, ResourceNames: []string{ParamName}},
			// The apiservers the cluster knows (apiservers.go): their
			// identity leases.
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list"}},
		},
	}
	m.EndpointsRole = &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: RoleName, Namespace: "default"},
		Rules: []rbacv1.PolicyRule{
			// The apiservers the cluster knows (apiservers.go): the
			// kubernetes service's endpoints, every apiserver's address.
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get"}, ResourceNames: []string{"kubernetes"}},
		},
	}
	m.EndpointsBind = &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: RoleName, Namespace: "default"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: RoleName},
		Subjects:   subjects,
	}
	m.RoleBind = &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: RoleName, Namespace: Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: RoleName},
		Subjects:   subjects,
	}
}

// Objects lists the manifests in apply order: RBAC first, then the
// parameter, then the policies and bindings (the token policy's binding
// last, so nothing is denied for a missing parameter meanwhile).
func (m Manifests) Objects() []any {
	return []any{m.Priority, m.FlowSchema, m.ClusterRole, m.ClusterBind, m.Role, m.RoleBind, m.EndpointsRole, m.EndpointsBind, m.Param,
		m.Guard, m.GuardBinding, m.Policy, m.Binding}
}

// RBAC lists only the supervisors' RBAC objects: what the gates need in
// gate mode, before the policy is installed.
func (m Manifests) RBAC() []any {
	return []any{m.ClusterRole, m.ClusterBind, m.Role, m.RoleBind, m.EndpointsRole, m.EndpointsBind}
}

// YAML renders every object as one multi-document stream for kubectl apply.
func (m Manifests) YAML() ([]byte, error) { return Render(m.Objects()) }

// Render writes objects as one multi-document YAML stream.
func Render(objects []any) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# kha-supervisor: the fence at the API server (kha-supervisor api-fence manifests).\n")
	b.WriteString("# Apply with kubectl apply -f; docs/operations.md, \"Fencing at the API server\".\n")
	for _, o := range objects {
		y, err := yaml.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("render %T: %w", o, err)
		}
		b.WriteString("---\n")
		b.Write(dropCreationTimestamp(y))
	}
	return b.Bytes(), nil
}

// dropCreationTimestamp removes the "creationTimestamp: null" and
// "status: {}" lines that unset fields marshal to.
func dropCreationTimestamp(y []byte) []byte {
	var out []string
	for _, l := range strings.Split(string(y), "\n") {
		if t := strings.TrimSpace(l); t == "creationTimestamp: null" || l == "status: {}" {
			continue
		}
		out = append(out, l)
	}
	return []byte(strings.Join(out, "\n"))
}

// WebhookName is the webhook inside the ValidatingWebhookConfiguration
// (which is named PolicyName): it contains PolicyName, so IsPolicyDenial
// recognises its refusals as the policy's.
const WebhookName = PolicyName + ".kha.io"

// WebhookTimeoutSeconds is the registration's timeoutSeconds: how long an
// apiserver waits for its node's supervisor before it refuses the write
// (failurePolicy Fail). The call is on loopback and the webhook answers
// with one quorum read, milliseconds; a supervisor that hangs (frozen, or
// its node paused) must cost the confirmation's probe (probeTimeout, 2 s)
// a refusal it recognises, not a timeout of its own, or the promotion can
// never excuse that apiserver (scenario 51 in token mode).
const WebhookTimeoutSeconds = 1

// DefaultWebhookURL is where each apiserver calls its own node's
// supervisor (api_fence.webhook's default port).
const DefaultWebhookURL = "https://127.0.0.1:16443" + WebhookPath

// WebhookOptions build the manifests for clusters older than 1.30.
type WebhookOptions struct {
	ManifestOptions
	URL      string // DefaultWebhookURL if empty
	CABundle []byte // PEM: every node's local CA (the URL is the same on each node; each serves its own certificate)
}

// BuildWebhook returns the manifests of the webhook variant: the
// supervisors' RBAC, the parameter, and a ValidatingWebhookConfiguration
// with the policy's rule. There is no guard (a ValidatingAdmissionPolicy
// too): RBAC alone keeps the parameter to the supervisors and the cluster
// admins.
func BuildWebhook(o WebhookOptions) []any {
	m := Build(o.ManifestOptions)
	return append(append([]any{m.Priority, m.FlowSchema}, m.RBAC()...), m.Param, WebhookConfiguration(o))
}

// BuildToken returns token mode's manifests: the policy set (Build) and the
// webhook's registration beside it. The policy refuses a stale token at
// once wherever the apiserver's cache is current; the webhook, which reads
// the parameter with a quorum read, refuses it where the cache is behind (a
// paused or healed apiserver). docs/architecture.md, "The webhook as the
// authority".
func BuildToken(o WebhookOptions) []any {
	return append(Build(o.ManifestOptions).Objects(), WebhookConfiguration(o))
}

// WebhookConfiguration registers the token webhook: every apiserver calls
// its own node's supervisor at o.URL for every managed write, failurePolicy
// Fail.
func WebhookConfiguration(o WebhookOptions) *admv1.ValidatingWebhookConfiguration {
	url := o.URL
	if url == "" {
		url = DefaultWebhookURL
	}
	fail := admv1.Fail
	none := admv1.SideEffectClassNone
	equivalent := admv1.Equivalent
	all := admv1.AllScopes
	timeout := int32(WebhookTimeoutSeconds)
	return &admv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName},
		Webhooks: []admv1.ValidatingWebhook{{
			Name:         WebhookName,
			ClientConfig: admv1.WebhookClientConfig{URL: &url, CABundle: o.CABundle},
			Rules: []admv1.RuleWithOperations{{
				Operations: []admv1.OperationType{admv1.Create, admv1.Update, admv1.Delete},
				// "*/*" matches every resource and every subresource.
				Rule: admv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}, Scope: &all},
			}},
			FailurePolicy: &fail,
			MatchPolicy:   &equivalent,
			// Dry runs reach the webhook (the promotion's confirmation
			// probes are dry runs); it has no side effects.
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          &timeout,
			// From 1.28 (beta) the apiserver calls the webhook only for the
			// managed users; an older one drops the field and calls it for
			// every write, which the webhook admits at once.
			MatchConditions: []admv1.MatchCondition{{
				Name:       "managed-component",
				Expression: "request.userInfo.username in " + celList(ManagedUsers()),
			}},
		}},
	}
}
