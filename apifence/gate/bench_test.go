package gate

import (
	"io"
	"net/http"
	"testing"
)

// BenchmarkGate: one small GET through the gate (client certificate,
// impersonation, the term asked twice) against the same GET straight to
// the stand-in upstream, over kept-alive connections on loopback. The
// difference is the gate's own cost; the real apiserver is in the kube test.
//
//	go test -run '^$' -bench Gate -benchtime 2000x ./apifence/gate
func BenchmarkGate(b *testing.B) {
	f := newFixture(b)
	c := f.client(b, f.cluster, "system:kube-scheduler")
	direct := f.up.srv.Client()
	for name, get := range map[string]func() (*http.Response, error){
		"direct":  func() (*http.Response, error) { return direct.Get(f.up.srv.URL + "/api/v1/x") },
		"viaGate": func() (*http.Response, error) { return c.Get(f.gate.URL() + "/api/v1/x") },
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				resp, err := get()
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
