package apifence

import (
	flowv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FlowControlName names the supervisor's PriorityLevelConfiguration and
// FlowSchema.
const FlowControlName = "kha-supervisor"

// flowMatchingPrecedence puts the FlowSchema before every built-in one but
// exempt (1) and probes (2): before system-leader-election (100) and
// kube-scheduler (800), which would otherwise classify the probes.
const flowMatchingPrecedence = 50

// flowControl builds a priority level of its own for the supervisor's
// requests and the confirmation's probes, and the FlowSchema that sends
// them there.
//
// Why not the built-in levels: `exempt` never queues nor rejects, which
// would also exempt the real scheduler's event writes in kube-system (the
// probes cannot be told apart from them: API Priority and Fairness runs
// after impersonation and sees the scheduler); `leader-election` lends
// and borrows seats and is shared with every component's lease renewals,
// which a loaded cluster keeps busy. A Limited level that lends nothing
// keeps its few seats whatever the other levels do, and still bounds what
// lands in it.
func (m *Manifests) flowControl() {
	shares, lend := int32(10), int32(0)
	m.Priority = &flowv1.PriorityLevelConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "flowcontrol.apiserver.k8s.io/v1", Kind: "PriorityLevelConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: FlowControlName},
		Spec: flowv1.PriorityLevelConfigurationSpec{
			Type: flowv1.PriorityLevelEnablementLimited,
			Limited: &flowv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: &shares,
				LendablePercent:          &lend,
				LimitResponse: flowv1.LimitResponse{Type: flowv1.LimitResponseTypeQueue,
					Queuing: &flowv1.QueuingConfiguration{Queues: 16, HandSize: 4, QueueLengthLimit: 50}},
			},
		},
	}
	var supervisors []flowv1.Subject
	for _, u := range m.supervisorSet {
		supervisors = append(supervisors, flowv1.Subject{Kind: flowv1.SubjectKindUser, User: &flowv1.UserSubject{Name: u}})
	}
	m.FlowSchema = &flowv1.FlowSchema{
		TypeMeta:   metav1.TypeMeta{APIVersion: "flowcontrol.apiserver.k8s.io/v1", Kind: "FlowSchema"},
		ObjectMeta: metav1.ObjectMeta{Name: FlowControlName},
		Spec: flowv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowv1.PriorityLevelConfigurationReference{Name: FlowControlName},
			MatchingPrecedence:         flowMatchingPrecedence,
			DistinguisherMethod:        &flowv1.FlowDistinguisherMethod{Type: flowv1.FlowDistinguisherMethodByUserType},
			Rules: []flowv1.PolicyRulesWithSubjects{
				{
					// The supervisor's own requests: the parameter, the
					// gates' TokenReviews, the apiserver set.
					Subjects: supervisors,
					ResourceRules: []flowv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
						ClusterScope: true, Namespaces: []string{flowv1.NamespaceEvery}}},
				},
				{
					// The confirmation's and the self-check's probes: dry-run
					// event creates in kube-system as the scheduler.
					Subjects:      []flowv1.Subject{{Kind: flowv1.SubjectKindUser, User: &flowv1.UserSubject{Name: ProbeUser}}},
					ResourceRules: []flowv1.ResourcePolicyRule{{Verbs: []string{"create"}, APIGroups: []string{""}, Resources: []string{"events"}, Namespaces: []string{Namespace}}},
				},
			},
		},
	}
}
