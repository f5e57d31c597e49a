package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// newObject returns an empty object of the Kubernetes API type of an
// apiVersion and kind the chart renders.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "networking.k8s.io/v1 Ingress":
		return &networkingv1.Ingress{}, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	}
	return nil, fmt.Errorf("no API type known for %s %s", apiVersion, kind)
}

// decode decodes a rendered document strictly into its API type, as the
// API server's strict field validation does: a field the type does not
// have (names are case-sensitive, unlike encoding/json's), or one given
// twice, is an error.
func decode(d doc) (any, error) {
	var head struct{ APIVersion, Kind string }
	if err := yaml.Unmarshal(d.yaml, &head); err != nil {
		return nil, fmt.Errorf("%s: %w", d.source, err)
	}
	obj, err := newObject(head.APIVersion, head.Kind)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.source, err)
	}
	data, err := yaml.YAMLToJSONStrict(d.yaml)
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", d.source, head.Kind, err)
	}
	strict, err := kjson.UnmarshalStrict(data, obj)
	if err == nil && len(strict) > 0 {
		err = errors.Join(strict...)
	}
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", d.source, head.Kind, err)
	}
	return obj, nil
}

// forPodman adapts the rendered objects for podman kube play (see the
// command's doc): the Deployment's pods on the host's network, Herald
// listening on addr; ConfigMaps kept; each Secret written to the folder
// secrets as NAME.json; what podman does not play left out.
func forPodman(docs []doc, addr, secrets string) ([]doc, error) {
	var out []doc
	for _, d := range docs {
		obj, err := decode(d)
		if err != nil {
			return nil, err
		}
		var pod *corev1.PodTemplateSpec
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			out = append(out, d)
			continue
		case *corev1.Secret:
			// podman 4.3 stores a played Secret as YAML but reads the keys
			// of a secretKeyRef or secretRef from a JSON object of keys and
			// base64 values: the Secret's data, stringData included as the
			// API server does, goes to a file for podman secret create.
			for k, v := range o.StringData {
				if o.Data == nil {
					o.Data = map[string][]byte{}
				}
				o.Data[k] = []byte(v)
			}
			data, err := json.Marshal(o.Data)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(secrets, o.Name+".json"), data, 0o600); err != nil {
				return nil, err
			}
			continue
		case *appsv1.Deployment:
			pod = &o.Spec.Template
		case *appsv1.StatefulSet:
			return nil, fmt.Errorf("podman kube play does not play a StatefulSet: render the cluster mode (redis.url)")
		default:
			continue
		}
		// On the host's network nothing is published (podman refuses port
		// mappings there): the container's port and its probes' are addr's.
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		pod.Spec.HostNetwork = true
		for i := range pod.Spec.Containers {
			c := &pod.Spec.Containers[i]
			c.Ports = nil
			for j := range c.Env {
				if c.Env[j].Name == "HERALD_ADDR" {
					c.Env[j].Value = addr
				}
			}
			for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
				if p != nil && p.HTTPGet != nil {
					p.HTTPGet.Port = intstr.Parse(port)
				}
			}
		}
		data, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if data, err = yaml.JSONToYAML(data); err != nil {
			return nil, err
		}
		out = append(out, doc{source: d.source, yaml: bytes.TrimSpace(data)})
	}
	return out, nil
}
