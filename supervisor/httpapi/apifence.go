package httpapi

// APIFenceSource is a Source that also reports the fence at the API server
// (api_fence.mode, the token the apiservers hold, whether it is the elected
// term's) as one line for /healthz; "" when the fence is off. It never
// makes /healthz fail: the loop's liveness is what /healthz judges.
type APIFenceSource interface {
	APIFenceLine() string
}

func apiFenceLine(src Source) string {
	if a, ok := src.(APIFenceSource); ok {
		if l := a.APIFenceLine(); l != "" {
			return l + "\n"
		}
	}
	return ""
}
