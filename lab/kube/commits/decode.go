package commits

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
)

// Kinds of committed write, as the audit log names the request that made it.
const (
	Create  = "create"  // a new key (verb create)
	Binding = "binding" // a pod's spec.nodeName set (create on pods/binding)
	Update  = "update"  // update, patch, a delete of an object with finalizers
	// Deleting is a graceful delete's first write: deletionTimestamp set
	// (delete, deletecollection; the apiserver sets it for nothing else).
	Deleting = "deleting"
	Delete   = "delete" // the key removed (delete, deletecollection)
)

// Object is what a committed write says about itself.
type Object struct {
	Resource  string // as the audit log names it ("pods", "events", "leases")
	Namespace string
	Name      string
	Kind      string // Create, Binding, Update or Delete
	// Role is the managed component the object names as its writer ("":
	// none): a binding is the scheduler's, a pod a ReplicaSet owns the
	// controller-manager's, an event or Lease names its component, else
	// the newest managedFields entry's manager; never for a delete (the
	// object names its makers, not its deleter).
	Role string
	// Host is the writer's host name when the object carries it (an
	// event's source, a Lease's holder), "" otherwise.
	Host string
	// Managed is the newest managedFields entry ("manager operation time").
	Managed string
	// Created is the object's creationTimestamp (seconds): a create the
	// audit log names no object for (generateName) is matched by it.
	Created time.Time
}

// Path is "namespace/name" or "name".
func (o Object) Path() string {
	if o.Namespace == "" {
		return o.Name
	}
	return o.Namespace + "/" + o.Name
}

// The apiserver's storage serializer: protobuf behind the "k8s\x00" magic
// for the built-in types (JSON for anything else); the deserializer
// recognises both.
var codecs = serializer.NewCodecFactory(scheme.Scheme)

var protoMagic = []byte("k8s\x00")

// decode reads one stored value.
func decode(b []byte) (runtime.Object, error) {
	if !bytes.HasPrefix(b, protoMagic) && !bytes.HasPrefix(b, []byte("{")) {
		return nil, fmt.Errorf("neither protobuf (k8s\\x00) nor JSON (%q...)", b[:min(len(b), 8)])
	}
	obj, _, err := codecs.UniversalDeserializer().Decode(b, nil, nil)
	return obj, err
}

// Decode describes w, a write under prefix.
func Decode(prefix string, w Write) (Object, error) {
	val := w.Value
	if w.Delete {
		val = w.Prev
	}
	if len(val) == 0 {
		return Object{}, fmt.Errorf("revision %d, %s: no value to decode (a delete without its previous value)", w.Rev, w.Key)
	}
	obj, err := decode(val)
	if err != nil {
		return Object{}, fmt.Errorf("revision %d, %s: %w", w.Rev, w.Key, err)
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return Object{}, fmt.Errorf("revision %d, %s: %w", w.Rev, w.Key, err)
	}
	o := Object{Namespace: acc.GetNamespace(), Name: acc.GetName(), Kind: Update, Created: acc.GetCreationTimestamp().Time}
	o.Resource = resource(prefix, w.Key, o.Namespace, o.Name)
	switch {
	case w.Delete:
		o.Kind = Delete
	case w.CreateRev == w.Rev:
		o.Kind = Create
	case bound(obj, w.Prev):
		o.Kind = Binding
	case deleting(acc, w.Prev):
		o.Kind = Deleting
	}
	var newest time.Time
	for _, f := range acc.GetManagedFields() {
		if f.Time != nil && !f.Time.Time.Before(newest) {
			newest = f.Time.Time
			o.Managed = f.Manager + " " + string(f.Operation) + " " + f.Time.UTC().Format(time.RFC3339)
			o.Role = roleOfManager(f.Manager)
		}
	}
	if o.Kind == Delete || o.Kind == Deleting {
		// The deleted object names who made it, not who deleted it (the
		// prober deletes the ReplicaSet's pods, which name the controller-
		// manager): a delete's writer is its request's, else unknown.
		o.Role = ""
		return o, nil
	}
	switch x := obj.(type) {
	case *corev1.Pod:
		if o.Kind == Binding {
			o.Role = audit.Scheduler
		}
		if o.Kind == Create && ownedByReplicaSet(acc.GetOwnerReferences()) {
			o.Role = audit.ControllerManager
		}
	case *corev1.Event:
		c := x.ReportingController
		if c == "" {
			c = x.Source.Component
		}
		o.Role, o.Host = roleOfComponent(c), x.Source.Host
		if o.Host == "" {
			o.Host = x.ReportingInstance
		}
	case *coordinationv1.Lease:
		if x.Namespace == "kube-system" && (x.Name == audit.Scheduler || x.Name == audit.ControllerManager) {
			o.Role = x.Name
			if h := x.Spec.HolderIdentity; h != nil {
				o.Host, _, _ = strings.Cut(*h, "_") // client-go: hostname_uuid
			}
		}
	}
	return o, nil
}

// resource is the key's resource path, named as the audit log names it.
func resource(prefix, key, ns, name string) string {
	r := strings.TrimPrefix(key, prefix+"/")
	r = strings.TrimSuffix(r, "/"+name)
	if ns != "" {
		r = strings.TrimSuffix(r, "/"+ns)
	}
	switch r {
	case "minions":
		return "nodes"
	case "services/specs":
		return "services"
	case "services/endpoints":
		return "endpoints"
	}
	if i := strings.LastIndexByte(r, '/'); i >= 0 { // group/resource
		r = r[i+1:]
	}
	return r
}

// bound: a pod update that set spec.nodeName (the binding subresource's
// write; nodeName cannot change once set).
func bound(obj runtime.Object, prev []byte) bool {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" || len(prev) == 0 {
		return false
	}
	before, err := decode(prev)
	if err != nil {
		return false
	}
	bp, ok := before.(*corev1.Pod)
	return ok && bp.Spec.NodeName == ""
}

// deleting: an update that set deletionTimestamp, which the apiserver
// does only when it serves a delete (a graceful one, or of an object with
// finalizers).
func deleting(acc metav1.Object, prev []byte) bool {
	if acc.GetDeletionTimestamp() == nil || len(prev) == 0 {
		return false
	}
	before, err := decode(prev)
	if err != nil {
		return false
	}
	b, err := meta.Accessor(before)
	return err == nil && b.GetDeletionTimestamp() == nil
}

func ownedByReplicaSet(refs []metav1.OwnerReference) bool {
	for _, r := range refs {
		if r.Kind == "ReplicaSet" && r.Controller != nil && *r.Controller {
			return true
		}
	}
	return false
}

func roleOfManager(m string) string {
	switch m {
	case audit.Scheduler:
		return audit.Scheduler
	case audit.ControllerManager:
		return audit.ControllerManager
	}
	return ""
}

// roleOfComponent names the component of an event's reporting controller
// ("default-scheduler", "replicaset-controller", ...).
func roleOfComponent(c string) string {
	switch {
	case strings.Contains(c, "scheduler"):
		return audit.Scheduler
	case strings.HasSuffix(c, "-controller"), c == audit.ControllerManager:
		return audit.ControllerManager
	}
	return ""
}
