package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// chartDir is Herald's chart.
var chartDir = filepath.Join("..", "..", "scripts", "helm", "herald")

// The value sets the tests render: the default (one node on SQLite) and
// the ways a cluster is given its Redis and database.
var valueSets = map[string][]string{
	"default": nil,
	"cluster": {"redis.url=redis://:pw@redis:6379/0", "database.url=postgres://herald:pw@db:5432/herald", "replicaCount=3"},
	"existing secrets": {"redis.existingSecret=herald-redis", "redis.existingSecretKey=url",
		"database.existingSecret=herald-db", "env.HERALD_LOG_LEVEL=debug", "secretEnv.HERALD_ADMIN_TOKEN=0123456789abcdef0123"},
	"monitored": {"redis.url=redis://redis:6379", "metrics.serviceMonitor.enabled=true", "ingress.enabled=true",
		"ingress.className=nginx", "ingress.tlsSecret=realtime-tls", "persistence.enabled=false"},
	"one node without a volume": {"persistence.enabled=false", "env.HERALD_APP_ID=1"},
}

// rendered renders the chart with a value set and decodes every object
// strictly; it returns them by kind.
func rendered(t *testing.T, sets []string) map[string][]any {
	t.Helper()
	vals, err := values(sets)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := render(chartDir, vals)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]any{}
	for _, d := range docs {
		obj, err := decode(d)
		if err != nil {
			t.Fatal(err)
		}
		kind := reflect.TypeOf(obj).Elem().Name()
		out[kind] = append(out[kind], obj)
	}
	return out
}

// helm lint --strict (no warning, no error) for each value set.
func TestLint(t *testing.T) {
	for name, sets := range valueSets {
		t.Run(name, func(t *testing.T) {
			vals, err := values(sets)
			if err != nil {
				t.Fatal(err)
			}
			if msgs := lintFailures(lintChart(chartDir, vals)); len(msgs) > 0 {
				t.Fatalf("helm lint: %v", msgs)
			}
		})
	}
}

// A field Kubernetes does not know, in any object, fails the decoding.
func TestDecodeIsStrict(t *testing.T) {
	for _, y := range []string{
		"apiVersion: apps/v1\nkind: Deployment\nspec:\n  replica: 3\n",
		"apiVersion: v1\nkind: Service\nspec:\n  ports:\n    - port: 80\n      targetport: http\n",
		"apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: 3\n  replicas: 2\n",
		"apiVersion: v1\nkind: Pod\n",
	} {
		if _, err := decode(doc{source: "test", yaml: []byte(y)}); err == nil {
			t.Errorf("decoded %q without an error", y)
		}
	}
}

// herald is the pod template's container of the workload.
func heraldContainer(t *testing.T, pod corev1.PodTemplateSpec) corev1.Container {
	t.Helper()
	if len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Name != "herald" {
		t.Fatalf("containers %+v, want herald alone", pod.Spec.Containers)
	}
	return pod.Spec.Containers[0]
}

// env returns the container's variable name.
func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// checkPod checks what every pod of the chart has: the node id from the
// pod's name, probes on /readyz and /healthz, a preStop sleep before the
// 4200 close, resources, no root and a read-only root, /tmp and /data
// writable.
func checkPod(t *testing.T, pod corev1.PodTemplateSpec) corev1.Container {
	t.Helper()
	c := heraldContainer(t, pod)
	if e := env(c, "HERALD_NODE_ID"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("HERALD_NODE_ID is %+v, want the pod's name", e)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "http" {
		t.Errorf("readiness probe %+v, want GET /readyz", p)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want GET /healthz", p)
	}
	if l := c.Lifecycle; l == nil || l.PreStop == nil || l.PreStop.Sleep == nil || l.PreStop.Sleep.Seconds <= 0 {
		t.Errorf("lifecycle %+v, want a preStop sleep", l)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g <= c.Lifecycle.PreStop.Sleep.Seconds+10 {
		t.Errorf("terminationGracePeriodSeconds %v: want room for the preStop sleep and the 10 s shutdown", g)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v, want requests and a memory limit", c.Resources)
	}
	ps, cs := pod.Spec.SecurityContext, c.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser != 65532 {
		t.Errorf("pod security context %+v, want non-root user 65532", ps)
	}
	if cs == nil || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation {
		t.Errorf("container security context %+v, want a read-only root and no privilege escalation", cs)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	if mounts["/tmp"] == "" || mounts["/data"] == "" {
		t.Errorf("mounts %+v, want /tmp and /data", c.VolumeMounts)
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("the pods get a service account token; Herald needs none")
	}
	return c
}

// secretRef is the Secret and key the variable comes from, "" when none.
func secretRef(c corev1.Container, name string) (string, string) {
	e := env(c, name)
	if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		return "", ""
	}
	return e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key
}

// Without Redis, the default: one node on SQLite, a StatefulSet of one pod
// with a volume claim for /data, and no PodDisruptionBudget.
func TestOneNode(t *testing.T) {
	objs := rendered(t, valueSets["default"])
	if len(objs["Deployment"]) != 0 || len(objs["StatefulSet"]) != 1 || len(objs["Service"]) != 1 || len(objs["PodDisruptionBudget"]) != 0 {
		t.Fatalf("objects %v, want a StatefulSet and a Service", kinds(objs))
	}
	ss := objs["StatefulSet"][0].(*appsv1.StatefulSet)
	c := checkPod(t, ss.Spec.Template)
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 1 {
		t.Errorf("replicas %v, want 1", ss.Spec.Replicas)
	}
	if len(ss.Spec.VolumeClaimTemplates) != 1 || ss.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Errorf("volume claims %+v, want data", ss.Spec.VolumeClaimTemplates)
	}
	if e := env(c, "HERALD_DB"); e == nil || e.Value != "/data/herald.db" {
		t.Errorf("HERALD_DB %+v, want the volume's /data/herald.db", e)
	}
	if e := env(c, "HERALD_REDIS_URL"); e != nil {
		t.Errorf("one node with HERALD_REDIS_URL %+v", e)
	}
	svc := objs["Service"][0].(*corev1.Service)
	if ss.Spec.ServiceName != svc.Name || !selects(svc.Spec.Selector, ss.Spec.Template.Labels) {
		t.Errorf("the Service %s (selector %v) does not serve the StatefulSet's pods %v", svc.Name, svc.Spec.Selector, ss.Spec.Template.Labels)
	}

	// Without persistence: an emptyDir, and no claim.
	objs = rendered(t, valueSets["one node without a volume"])
	ss = objs["StatefulSet"][0].(*appsv1.StatefulSet)
	if len(ss.Spec.VolumeClaimTemplates) != 0 || volume(ss.Spec.Template, "data") == nil || volume(ss.Spec.Template, "data").EmptyDir == nil {
		t.Errorf("persistence off: claims %+v, volumes %+v", ss.Spec.VolumeClaimTemplates, ss.Spec.Template.Spec.Volumes)
	}
	if cm := objs["ConfigMap"]; len(cm) != 1 || cm[0].(*corev1.ConfigMap).Data["HERALD_APP_ID"] != "1" {
		t.Errorf("env: ConfigMaps %+v, want HERALD_APP_ID", cm)
	}
}

// With Redis and PostgreSQL given as values: a Deployment of replicaCount
// pods rolling one at a time, both URLs from the chart's Secret, a
// PodDisruptionBudget.
func TestCluster(t *testing.T) {
	objs := rendered(t, valueSets["cluster"])
	if len(objs["Deployment"]) != 1 || len(objs["StatefulSet"]) != 0 || len(objs["Secret"]) != 1 || len(objs["PodDisruptionBudget"]) != 1 {
		t.Fatalf("objects %v, want a Deployment, its Secret and a PodDisruptionBudget", kinds(objs))
	}
	dep := objs["Deployment"][0].(*appsv1.Deployment)
	c := checkPod(t, dep.Spec.Template)
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", dep.Spec.Replicas)
	}
	if ru := dep.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("rolling update %+v, want no pod down before its replacement is ready", ru)
	}
	secret := objs["Secret"][0].(*corev1.Secret)
	for name, want := range map[string]string{"HERALD_REDIS_URL": "redis://:pw@redis:6379/0", "HERALD_DB": "postgres://herald:pw@db:5432/herald"} {
		s, key := secretRef(c, name)
		if s != secret.Name || secret.StringData[key] != want {
			t.Errorf("%s from Secret %q key %q (%q), want the chart's Secret %s holding %s", name, s, key, secret.StringData[key], secret.Name, want)
		}
	}
	pdb := objs["PodDisruptionBudget"][0].(*policyv1.PodDisruptionBudget)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || !selects(pdb.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget %+v, want at most one of the pods down", pdb.Spec)
	}
	if v := volume(dep.Spec.Template, "data"); v == nil || v.EmptyDir == nil {
		t.Errorf("the cluster's /data is %+v, want an emptyDir", v)
	}
}

// Secrets of the operator's: the variables name them, the chart's Secret
// holds only secretEnv, env is a ConfigMap; both roll the pods on change.
func TestExistingSecrets(t *testing.T) {
	objs := rendered(t, valueSets["existing secrets"])
	dep := objs["Deployment"][0].(*appsv1.Deployment)
	c := checkPod(t, dep.Spec.Template)
	if s, key := secretRef(c, "HERALD_REDIS_URL"); s != "herald-redis" || key != "url" {
		t.Errorf("HERALD_REDIS_URL from %q %q, want herald-redis's url", s, key)
	}
	if s, key := secretRef(c, "HERALD_DB"); s != "herald-db" || key != "database-url" {
		t.Errorf("HERALD_DB from %q %q, want herald-db's database-url", s, key)
	}
	secret := objs["Secret"][0].(*corev1.Secret)
	if len(secret.StringData) != 1 || secret.StringData["HERALD_ADMIN_TOKEN"] == "" {
		t.Errorf("the chart's Secret holds %v, want HERALD_ADMIN_TOKEN alone", secret.StringData)
	}
	var fromCM, fromSecret bool
	for _, e := range c.EnvFrom {
		fromCM = fromCM || (e.ConfigMapRef != nil && e.ConfigMapRef.Name == objs["ConfigMap"][0].(*corev1.ConfigMap).Name)
		fromSecret = fromSecret || (e.SecretRef != nil && e.SecretRef.Name == secret.Name)
	}
	if !fromCM || !fromSecret {
		t.Errorf("envFrom %+v, want the chart's ConfigMap and Secret", c.EnvFrom)
	}
	before := dep.Spec.Template.Annotations["checksum/config"]
	changed := rendered(t, append(valueSets["existing secrets"][:len(valueSets["existing secrets"]):len(valueSets["existing secrets"])], "env.HERALD_LOG_LEVEL=info"))
	if after := changed["Deployment"][0].(*appsv1.Deployment).Spec.Template.Annotations["checksum/config"]; before == "" || after == before {
		t.Errorf("checksum/config %q, then %q after a change of env: the pods would not roll", before, after)
	}
}

// The optional ServiceMonitor scrapes /metrics of the pods; the optional
// Ingress keeps WebSockets open and sends everything to the Service.
func TestServiceMonitorAndIngress(t *testing.T) {
	objs := rendered(t, valueSets["monitored"])
	if len(objs["ServiceMonitor"]) != 1 || len(objs["Ingress"]) != 1 {
		t.Fatalf("objects %v, want a ServiceMonitor and an Ingress", kinds(objs))
	}
	svc := objs["Service"][0].(*corev1.Service)
	sm := objs["ServiceMonitor"][0].(*monitoringv1.ServiceMonitor)
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Path != "/metrics" || sm.Spec.Endpoints[0].Port != "http" ||
		!selects(sm.Spec.Selector.MatchLabels, svc.Labels) {
		t.Errorf("ServiceMonitor %+v, want /metrics of the Service's http port", sm.Spec)
	}
	ing := objs["Ingress"][0].(*networkingv1.Ingress)
	for _, a := range []string{"nginx.ingress.kubernetes.io/proxy-read-timeout", "nginx.ingress.kubernetes.io/proxy-send-timeout"} {
		if ing.Annotations[a] != "3600" {
			t.Errorf("Ingress annotation %s=%q, want the WebSocket timeout 3600", a, ing.Annotations[a])
		}
	}
	if len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name != svc.Name || len(ing.Spec.TLS) != 1 {
		t.Errorf("Ingress %+v, want TLS and every path to the Service %s", ing.Spec, svc.Name)
	}
	if len(objs["ServiceMonitor"]) == 1 && len(rendered(t, valueSets["cluster"])["ServiceMonitor"]) != 0 {
		t.Errorf("a ServiceMonitor without metrics.serviceMonitor.enabled")
	}
}

// The objects for podman kube play: the Deployment's pods on the host's
// network listening on the address given, the Secret's data in a file of
// JSON, the Service and PodDisruptionBudget left out.
func TestForPodman(t *testing.T) {
	vals, err := values(valueSets["cluster"])
	if err != nil {
		t.Fatal(err)
	}
	docs, err := render(chartDir, vals)
	if err != nil {
		t.Fatal(err)
	}
	secrets := t.TempDir()
	docs, err = forPodman(docs, "127.0.0.1:18080", secrets)
	if err != nil {
		t.Fatal(err)
	}
	var secret map[string][]byte
	data, err := os.ReadFile(filepath.Join(secrets, "herald.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &secret); err != nil || string(secret["redis-url"]) != "redis://:pw@redis:6379/0" {
		t.Errorf("the Secret for podman secret create: %v %s", err, data)
	}
	var got []string
	for _, d := range docs {
		obj, err := decode(d)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, reflect.TypeOf(obj).Elem().Name())
		if dep, ok := obj.(*appsv1.Deployment); ok {
			c := heraldContainer(t, dep.Spec.Template)
			if !dep.Spec.Template.Spec.HostNetwork || env(c, "HERALD_ADDR") == nil || env(c, "HERALD_ADDR").Value != "127.0.0.1:18080" {
				t.Errorf("the Deployment for podman: host network %v, HERALD_ADDR %+v", dep.Spec.Template.Spec.HostNetwork, env(c, "HERALD_ADDR"))
			}
		}
	}
	if strings.Join(got, " ") != "Deployment" {
		t.Errorf("objects for podman %q, want the Deployment alone", got)
	}
}

func kinds(objs map[string][]any) map[string]int {
	out := map[string]int{}
	for k, v := range objs {
		out[k] = len(v)
	}
	return out
}

// selects says whether a selector's labels are all among labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

func volume(pod corev1.PodTemplateSpec, name string) *corev1.Volume {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return &pod.Spec.Volumes[i]
		}
	}
	return nil
}
