package apifence

import (
	"context"
	"fmt"

	admv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// In token mode the webhook is the authority where an apiserver's cache of
// the parameter is behind (a paused or healed apiserver): the policy, read
// from that cache, admits the old token there. Its registration is no more
// guarded than the policy's binding (admission is never called for
// admission objects), and the self-check's stale probe cannot see it gone:
// the policy refuses that probe first wherever its cache is current. So
// the leader also reads the registration with every self-check: missing,
// without the webhook, or with failurePolicy Ignore, the stale-cache hole
// is open again, and status, /healthz, kha_api_fence_webhook_registered
// and the alert KhaAPIFenceWebhookOff say so.

// webhookConfigPath is the registration's REST path (named PolicyName).
const webhookConfigPath = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/" + PolicyName

// WebhookProblem reads the token webhook's registration and says what is
// wrong with it ("" when it is in place). An error means the read failed
// for another reason (unreachable, a timeout): nothing is known.
func WebhookProblem(ctx context.Context, api *kubeapi.Client) (problem string, err error) {
	var vwc admv1.ValidatingWebhookConfiguration
	err = api.Do(ctx, "GET", webhookConfigPath, nil, nil, &vwc)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("the token webhook's registration (validatingwebhookconfiguration %s) is missing", PolicyName), nil
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("the token webhook's registration %s cannot be read (forbidden: re-apply the RBAC of `kha-supervisor api-fence manifests`)", PolicyName), nil
	case err != nil:
		return "", fmt.Errorf("api fence: read the token webhook's registration: %w", err)
	}
	return registrationProblem(&vwc), nil
}

// registrationProblem is WebhookProblem's judgement of what it read.
func registrationProblem(vwc *admv1.ValidatingWebhookConfiguration) string {
	for _, w := range vwc.Webhooks {
		if w.Name != WebhookName {
			continue
		}
		if w.FailurePolicy != nil && *w.FailurePolicy != admv1.Fail {
			return fmt.Sprintf("the token webhook %s has failurePolicy %s: an apiserver that cannot call it admits a stale token", WebhookName, *w.FailurePolicy)
		}
		return ""
	}
	return fmt.Sprintf("the registration %s has no webhook %s", PolicyName, WebhookName)
}
