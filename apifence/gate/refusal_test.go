package gate

import (
	"net/http"
	"testing"
)

// The answers a gate sends on to the next apiserver: the token policy's or
// webhook's refusal, and an apiserver's failure to call its node's token
// webhook (as the JSON Status carries it, quotes escaped). Nothing else.
func TestTokenRefusal(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   bool
	}{
		{422, `{"message":"events is forbidden: ValidatingAdmissionPolicy 'kha-fencing-token' with binding 'kha-fencing-token' denied request"}`, true},
		{422, `{"message":"admission webhook \"kha-fencing-token.kha.io\" denied the request"}`, true},
		{500, `{"message":"Internal error occurred: failed calling webhook \"kha-fencing-token.kha.io\": failed to call webhook: Post \"https://127.0.0.1:16443/validate?timeout=1s\": context deadline exceeded"}`, true},
		{500, "\x0a\x04Status Internal error occurred: failed calling webhook \"kha-fencing-token.kha.io\": context deadline exceeded", true},
		{422, `{"message":"Pod \"x\" is invalid"}`, false},
		{500, `{"message":"Internal error occurred: failed calling webhook \"other.example.com\": connection refused"}`, false},
		{500, `{"message":"etcdserver: request timed out"}`, false},
		{http.StatusServiceUnavailable, `{"message":"kha-fencing-token"}`, false},
	} {
		if got := tokenRefusal(tc.status, []byte(tc.body)); got != tc.want {
			t.Errorf("tokenRefusal(%d, %s) = %v, want %v", tc.status, tc.body, got, tc.want)
		}
	}
}
