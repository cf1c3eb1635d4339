package kubeapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
)

// A Status answer becomes a StatusError that apierrors classifies; a
// non-Status answer still carries its code.
func TestDoMapsStatusAnswers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/invalid":
			w.WriteHeader(422)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"denied","reason":"Invalid","code":422}`))
		case "/plain":
			w.WriteHeader(503)
			_, _ = w.Write([]byte("upstream down"))
		default:
			_, _ = w.Write([]byte(`{"kind":"ConfigMap","metadata":{"name":"x","resourceVersion":"7"},"data":{"token":"3"}}`))
		}
	}))
	defer srv.Close()
	c, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Do(ctx, "POST", "/invalid", nil, map[string]string{}, nil); !apierrors.IsInvalid(err) {
		t.Errorf("422 Status: %v, want IsInvalid", err)
	}
	if err := c.Do(ctx, "GET", "/plain", nil, nil, nil); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("503 text: %v, want IsServiceUnavailable", err)
	}
	var cm ConfigMap
	if err := c.Do(ctx, "GET", "/cm", nil, nil, &cm); err != nil || cm.ResourceVersion != "7" || cm.Data["token"] != "3" {
		t.Errorf("decode: %+v, %v", cm, err)
	}
}
