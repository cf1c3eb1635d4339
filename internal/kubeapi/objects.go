package kubeapi

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The objects the fence reads and writes, with only the fields it uses
// (k8s.io/api/core/v1 would bring the whole core group into the binary).

// ConfigMap is a v1 ConfigMap.
type ConfigMap struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Data              map[string]string `json:"data,omitempty"`
}

// ObjectReference is a v1 ObjectReference.
type ObjectReference struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name,omitempty"`
}

// Event is a v1 (core) Event.
type Event struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	InvolvedObject    ObjectReference `json:"involvedObject"`
	Reason            string          `json:"reason,omitempty"`
	Message           string          `json:"message,omitempty"`
	Type              string          `json:"type,omitempty"`
	Source            struct {
		Component string `json:"component,omitempty"`
	} `json:"source"`
	FirstTimestamp metav1.Time `json:"firstTimestamp"`
	LastTimestamp  metav1.Time `json:"lastTimestamp"`
	Count          int32       `json:"count,omitempty"`
}
