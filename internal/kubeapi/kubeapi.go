// Package kubeapi is the few REST calls the supervisor makes (the fence's
// TokenReview, one ConfigMap and dry-run Events; the drill probe's pods,
// one ReplicaSet and its namespace), sent with client-go's transports (TLS,
// the credential, impersonation) but without client-go's typed clientset:
// the clientset registers every API group at start-up, which tripled the
// supervisor's binary (25 MB to 76 MB) and grew its idle heap.
package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// Client sends JSON requests to one apiserver.
type Client struct {
	hc   *http.Client
	host string
}

// New builds a client from cfg (its Host, TLS, credential and
// Impersonate are all honoured, through rest.HTTPClientFor).
func New(cfg *rest.Config) (*Client, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{hc: hc, host: strings.TrimSuffix(cfg.Host, "/")}, nil
}

// FromHTTP is a client over hc (e.g. an upstream.Set's failover client,
// which picks the apiserver itself), addressing requests to host.
func FromHTTP(hc *http.Client, host string) *Client {
	return &Client{hc: hc, host: strings.TrimSuffix(host, "/")}
}

// maxBody bounds what is read of an answer: these objects are small.
const maxBody = 4 << 20

// Do sends in (JSON, nil for none) and decodes a 2xx answer into out (nil
// to discard). A non-2xx answer is returned as an *apierrors.StatusError,
// so apierrors.IsInvalid, IsNotFound, IsConflict... work on it.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	u := c.host + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError(resp.StatusCode, method, path, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

func statusError(code int, method, path string, data []byte) error {
	var st metav1.Status
	if json.Unmarshal(data, &st) == nil && st.Kind == "Status" {
		if st.Code == 0 {
			st.Code = int32(code)
		}
		return &apierrors.StatusError{ErrStatus: st}
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return apierrors.NewGenericServerResponse(code, method, schema.GroupResource{Resource: path}, "", msg, 0, false)
}
