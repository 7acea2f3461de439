"""Threat-model row: compose defaulted the database password to `agentrm`; the Kubernetes
manifests let containers escalate privileges, write their root filesystem and keep Linux
capabilities, and set no NetworkPolicy, so a compromised pod could reach anything. The
checks read the files in ops/ as the tools do (YAML)."""
from __future__ import annotations

import re

import pytest

from tests.unit.test_ops_files import OPS, documents


def pod_specs() -> dict[str, dict]:
    specs = {}
    for name in ("deployment.yaml", "postgres.yaml"):
        for doc in documents(OPS / "k8s" / name):
            if doc["kind"] in ("Deployment", "StatefulSet"):
                specs[doc["metadata"]["name"]] = doc["spec"]["template"]["spec"]
    return specs


def test_compose_has_no_default_for_any_secret():
    text = (OPS / "compose.yaml").read_text()
    services = documents(OPS / "compose.yaml")[0]["services"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
    # Every use of a secret variable requires it (`:?`), none falls back (`:-`).
    for variable in ("POSTGRES_PASSWORD", "AGENTRM_OPERATOR_TOKEN", "AGENTRM_SECRETS_KEY"):
        uses = re.findall(r"\$\{" + variable + r"(:[?-])", text)
        assert uses and set(uses) == {":?"}, (variable, uses)


@pytest.mark.parametrize("workload", ["agentrm", "agentrm-postgres"])
def test_every_container_runs_unprivileged_on_a_read_only_root(workload):
    spec = pod_specs()[workload]
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] > 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for container in spec.get("initContainers", []) + spec["containers"]:
        locked = container["securityContext"]
        assert locked["allowPrivilegeEscalation"] is False, container["name"]
        assert locked["readOnlyRootFilesystem"] is True, container["name"]
        assert locked["capabilities"]["drop"] == ["ALL"] and "add" not in locked["capabilities"]
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        assert "/tmp" in mounts, container["name"]      # the one writable scratch place besides data
        for path, name in mounts.items():
            assert name in volumes or name == "data", (container["name"], path)
    if workload == "agentrm":   # the data dir of the image (AGENTRM_DATA_DIR) is writable scratch
        dockerfile = (OPS / "Dockerfile").read_text()
        data_dir = re.search(r"AGENTRM_DATA_DIR=(\S+)", dockerfile)[1]
        assert any(m["mountPath"] == data_dir for m in spec["containers"][0]["volumeMounts"])
        assert "emptyDir" in volumes["data"] and "emptyDir" in volumes["tmp"]


def test_network_policies_let_through_only_what_each_side_needs():
    policies = {d["metadata"]["name"]: d["spec"] for d in documents(OPS / "k8s" / "networkpolicy.yaml")}
    app, db = policies["agentrm"], policies["agentrm-postgres"]
    deployment = documents(OPS / "k8s" / "deployment.yaml")[0]
    port = deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert app["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert set(app["policyTypes"]) == set(db["policyTypes"]) == {"Ingress", "Egress"}
    assert [p["port"] for rule in app["ingress"] for p in rule["ports"]] == [port]
    egress_ports = {(p["protocol"], p["port"]) for rule in app["egress"] for p in rule["ports"]}
    assert egress_ports == {("TCP", 5432), ("UDP", 53), ("TCP", 53), ("TCP", 443)}
    to_db = next(r for r in app["egress"] if any(p["port"] == 5432 for p in r["ports"]))
    assert to_db["to"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "agentrm-postgres"}}}]
    # PostgreSQL: from AgentRM on 5432 only, and out to nothing.
    assert db["ingress"] == [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "agentrm"}}}],
                              "ports": [{"protocol": "TCP", "port": 5432}]}]
    assert db["egress"] == []
