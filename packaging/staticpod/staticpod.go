// Package staticpod turns a kubeadm static-pod manifest of kube-scheduler or
// kube-controller-manager into the systemd unit kha-supervisor manages in its
// place: the same command line, leader election off (kha-supervisor's lease
// is the only election), the stop and restart behaviour the lab measured
// (docs/operations.md, "Running the real components under kha-supervisor").
//
// It refuses, rather than guesses, whatever a unit cannot reproduce: a pod
// with more than one container, a volume mounted at another path than the
// host's, environment from secrets or config maps. What it cannot know (where
// the operator installs the component's binary) is a parameter.
package staticpod

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Component is a control-plane component the conversion knows.
type Component struct {
	Name        string // kube-scheduler, kube-controller-manager
	Description string
	Doc         string
	// SuccessExit1: the component exits 1 on SIGTERM without leader
	// election (kube-scheduler "finished without leader elect").
	SuccessExit1 bool
}

// Components are the two components kha-supervisor is made for.
var Components = map[string]Component{
	"kube-scheduler": {
		Name: "kube-scheduler", Description: "Kubernetes scheduler", SuccessExit1: true,
		Doc: "https://kubernetes.io/docs/reference/command-line-tools-reference/kube-scheduler/",
	},
	"kube-controller-manager": {
		Name: "kube-controller-manager", Description: "Kubernetes controller manager",
		Doc: "https://kubernetes.io/docs/reference/command-line-tools-reference/kube-controller-manager/",
	},
}

// pod is the part of a v1 Pod manifest the conversion reads.
type pod struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Containers []container `json:"containers"`
		Volumes    []struct {
			Name     string `json:"name"`
			HostPath *struct {
				Path string `json:"path"`
			} `json:"hostPath"`
		} `json:"volumes"`
	} `json:"spec"`
}

type container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command"`
	Args    []string `json:"args"`
	Env     []envVar `json:"env"`
	Ports   []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	} `json:"volumeMounts"`
	LivenessProbe *struct {
		HTTPGet *struct {
			Host   string `json:"host"`
			Path   string `json:"path"`
			Port   any    `json:"port"`
			Scheme string `json:"scheme"`
		} `json:"httpGet"`
	} `json:"livenessProbe"`
}

type envVar struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	ValueFrom any    `json:"valueFrom"`
}

// Unit is the result of a conversion.
type Unit struct {
	Component Component
	Name      string   // kube-scheduler.service
	Text      string   // the unit file
	Notes     []string // what the operator must still do, one line each
	Image     string   // the manifest's image: the binary's version must match it
}

// Options of a conversion.
type Options struct {
	// BinDir holds the component's binary (default /usr/local/bin).
	BinDir string
}

// Convert reads a static-pod manifest and returns the unit that runs its
// component under kha-supervisor. source names the manifest in errors.
func Convert(source string, manifest []byte, o Options) (Unit, error) {
	var p pod
	if err := yaml.Unmarshal(manifest, &p); err != nil {
		return Unit{}, fmt.Errorf("%s: not a pod manifest: %w", source, err)
	}
	if p.Kind != "Pod" || p.APIVersion != "v1" {
		return Unit{}, fmt.Errorf("%s: kind %q apiVersion %q: want a v1 Pod (a kubeadm static-pod manifest)", source, p.Kind, p.APIVersion)
	}
	if len(p.Spec.Containers) != 1 {
		return Unit{}, fmt.Errorf("%s: %d containers: a unit runs exactly one", source, len(p.Spec.Containers))
	}
	c := p.Spec.Containers[0]
	argv := append(append([]string(nil), c.Command...), c.Args...)
	if len(argv) == 0 {
		return Unit{}, fmt.Errorf("%s: container %q has no command", source, c.Name)
	}
	comp, ok := Components[path.Base(argv[0])]
	if !ok {
		return Unit{}, fmt.Errorf("%s: command %q is neither kube-scheduler nor kube-controller-manager", source, argv[0])
	}
	if err := checkMounts(source, p, c); err != nil {
		return Unit{}, err
	}
	env, err := environment(source, c.Env)
	if err != nil {
		return Unit{}, err
	}
	bin := o.BinDir
	if bin == "" {
		bin = "/usr/local/bin"
	}
	flags, note := leaderElectOff(argv[1:])
	u := Unit{Component: comp, Name: comp.Name + ".service", Image: c.Image}
	if note != "" {
		u.Notes = append(u.Notes, note)
	}
	u.Notes = append(u.Notes, fmt.Sprintf("install the %s binary of the image's version (%s) as %s", comp.Name, c.Image, path.Join(bin, comp.Name)))
	if h := healthNote(comp, c); h != "" {
		u.Notes = append(u.Notes, h)
	}
	u.Notes = append(u.Notes, fmt.Sprintf("move %s out of the kubelet's manifest directory (or the kubelet runs a second copy), never enable %s, then run `kha-supervisor install-dropins`", source, u.Name))
	u.Text = render(comp, source, path.Join(bin, comp.Name), flags, env)
	return u, nil
}

// checkMounts refuses a volume the unit would read at another path: kubeadm
// mounts every hostPath at the same path inside the pod, which is what lets
// the command line run unchanged on the host.
func checkMounts(source string, p pod, c container) error {
	host := map[string]string{}
	for _, v := range p.Spec.Volumes {
		if v.HostPath == nil {
			host[v.Name] = ""
			continue
		}
		host[v.Name] = v.HostPath.Path
	}
	for _, m := range c.VolumeMounts {
		hp, ok := host[m.Name]
		switch {
		case !ok:
			return fmt.Errorf("%s: volumeMount %q names no volume", source, m.Name)
		case hp == "":
			return fmt.Errorf("%s: volume %q is not a hostPath: a unit cannot mount it", source, m.Name)
		case path.Clean(hp) != path.Clean(m.MountPath):
			return fmt.Errorf("%s: volume %q is host path %s mounted at %s: the unit would read %s; make them equal in the manifest first", source, m.Name, hp, m.MountPath, m.MountPath)
		}
	}
	return nil
}

func environment(source string, vars []envVar) ([]string, error) {
	var out []string
	for _, v := range vars {
		if v.ValueFrom != nil {
			return nil, fmt.Errorf("%s: env %s takes its value from the API (valueFrom): set it in the unit by hand", source, v.Name)
		}
		out = append(out, v.Name+"="+v.Value)
	}
	sort.Strings(out)
	return out, nil
}

// leaderElectOff sets --leader-elect=false: with the component's own
// election left on a failover waits for kha's lease and then the
// component's Lease (15 s by default). It drops the election's tuning
// flags, which mean nothing without it.
func leaderElectOff(flags []string) ([]string, string) {
	var out []string
	var dropped []string
	for _, f := range flags {
		name, _, _ := strings.Cut(f, "=")
		switch {
		case name == "--leader-elect":
			dropped = append(dropped, f)
		case strings.HasPrefix(name, "--leader-elect-"):
			dropped = append(dropped, f)
		default:
			out = append(out, f)
		}
	}
	out = append(out, "--leader-elect=false")
	if len(dropped) == 0 {
		return out, ""
	}
	return out, "replaced " + strings.Join(dropped, " ") + " by --leader-elect=false: kha-supervisor's lease is the only election"
}

func healthNote(comp Component, c container) string {
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil {
		return ""
	}
	g := c.LivenessProbe.HTTPGet
	host := g.Host
	if host == "" {
		host = "127.0.0.1"
	}
	scheme := strings.ToLower(g.Scheme)
	if scheme == "" {
		scheme = "http"
	}
	port := fmt.Sprint(g.Port)
	for _, p := range c.Ports {
		if p.Name == port { // a named port: the probe's port is the container's
			port = fmt.Sprint(p.ContainerPort)
		}
	}
	return fmt.Sprintf("give it a health probe in the supervisor's [health]: probes = [\"%s.service=%s://%s:%s%s\"] (kubeadm's serving certificate is self-signed: insecure = true)", comp.Name, scheme, host, port, g.Path)
}

func render(comp Component, source, bin string, flags, env []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s.service: %s, from the static pod %s (kha-supervisor kubeadm-unit).\n", comp.Name, strings.ToLower(comp.Description[:1])+comp.Description[1:], source)
	b.WriteString("# Managed by kha-supervisor: never enable it; the supervisor starts it on the leader only,\n")
	b.WriteString("# and `kha-supervisor install-dropins` adds the guard and the stop budget (UNIT.d/50-kha-supervisor.conf).\n")
	b.WriteString("[Unit]\n")
	fmt.Fprintf(&b, "Description=%s\nDocumentation=%s\n", comp.Description, comp.Doc)
	b.WriteString("After=network-online.target\nWants=network-online.target\n\n[Service]\n")
	for _, e := range env {
		fmt.Fprintf(&b, "Environment=%s\n", quote(e))
	}
	fmt.Fprintf(&b, "ExecStart=%s", bin)
	for _, f := range flags {
		fmt.Fprintf(&b, " \\\n\t%s", quote(f))
	}
	b.WriteString("\nRestart=on-failure\nRestartSec=200ms\n")
	if comp.SuccessExit1 {
		fmt.Fprintf(&b, "# %s without --leader-elect exits 1 on SIGTERM: that is its normal stop.\nSuccessExitStatus=1\n", comp.Name)
	}
	return b.String()
}

// quote makes one argv word safe for systemd's command-line parser: words
// with spaces, quotes, backslashes, '$' or '%' are double-quoted with
// systemd's escapes (systemd.syntax(7), systemd.service(5) "COMMAND LINES").
func quote(s string) string {
	s = strings.ReplaceAll(s, "%", "%%")
	s = strings.ReplaceAll(s, "$", "$$")
	if !strings.ContainsAny(s, " \t\"'\\;") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}
