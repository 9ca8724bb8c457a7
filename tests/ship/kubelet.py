"""A pod template run by Docker as a kubelet would run it, for tests of the image with the
manifests gitscale ships and `init` writes (test_image_manifests.py).

What is carried over from the pod spec: the container's command and args; its env (values,
``fieldRef`` to the pod's namespace and name, ``secretKeyRef``); the pod's and container's
securityContext (``runAsUser``/``runAsGroup``/``fsGroup``, ``readOnlyRootFilesystem``,
``allowPrivilegeEscalation: false``, capabilities); its volumes (``emptyDir`` as a tmpfs,
``secret`` and ``projected`` secrets as read-only files, ``optional`` ones too, a
``persistentVolumeClaim`` as a named Docker volume); the service account token, unless the pod
opts out (``automountServiceAccountToken: false``); and the ports its probes name. What is
not (a test fails on it rather than ignore it): any other volume or ``valueFrom``. Every
container shares the host's network (``--network host``): the servers are the test's, on
127.0.0.1, and the ports the pod listens on are the host's.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class ServiceAccount:
    """What the kubelet mounts for the pod's service account, and the API server's address it
    puts in the environment (in-cluster config)."""

    token: str
    ca: Path  # the API server's CA certificate
    host: str
    port: int


@dataclass
class Kubelet:
    image: str  # run instead of the container's own image (the one under test)
    workdir: Path  # where secret volumes and the service account's files are written
    namespace: str
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)  # name → key → value
    service_account: ServiceAccount | None = None
    claims: str = "gitscale-test-"  # a claim is the Docker volume of this prefix and its name

    def argv(self, pod: dict[str, Any], name: str) -> tuple[list[str], dict[str, str]]:
        """``docker run`` arguments (without ``docker run``) for the pod's first container,
        and the environment the secret values go through (``-e NAME`` names them only)."""
        spec = pod["spec"]
        (container,) = spec["containers"]
        argv = ["--name", name, "--network", "host"]
        pod_security = spec.get("securityContext", {})
        security = {**pod_security, **container.get("securityContext", {})}
        argv += self._security(security, pod_security.get("fsGroup"))
        mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
        for volume in spec.get("volumes", []):
            if volume["name"] in mounts:
                argv += self._volume(volume, mounts.pop(volume["name"]), name)
        assert not mounts, f"mounts of no volume: {sorted(mounts)}"
        secret_env: dict[str, str] = {}
        for var in container.get("env", []):
            argv += self._env(var, name, secret_env)
        if spec.get("automountServiceAccountToken", True) and self.service_account:
            argv += self._service_account(name)
        command = container.get("command")
        if command:
            argv += ["--entrypoint", command[0]]
        argv.append(self.image)
        return argv + list(command[1:] if command else []) + list(container.get("args", [])), \
            secret_env

    def port(self, pod: dict[str, Any], port: int | str) -> int:
        """A probe's port: a number, or the name of one of the container's ports."""
        if isinstance(port, int):
            return port
        (container,) = pod["spec"]["containers"]
        return int(next(p["containerPort"] for p in container.get("ports", [])
                        if p.get("name") == port))

    def _security(self, security: dict[str, Any], fs_group: int | None) -> list[str]:
        argv: list[str] = []
        if "runAsUser" in security:
            argv += ["--user", f"{security['runAsUser']}:{security.get('runAsGroup', 0)}"]
        if fs_group is not None:
            argv += ["--group-add", str(fs_group)]
        if security.get("readOnlyRootFilesystem"):
            argv.append("--read-only")
        if security.get("allowPrivilegeEscalation") is False:
            argv += ["--security-opt", "no-new-privileges"]
        capabilities = security.get("capabilities", {})
        argv += [a for c in capabilities.get("drop", []) for a in ("--cap-drop", c)]
        argv += [a for c in capabilities.get("add", []) for a in ("--cap-add", c)]
        return argv

    def _volume(self, volume: dict[str, Any], mount: dict[str, Any], pod: str) -> list[str]:
        path = mount["mountPath"]
        if "emptyDir" in volume:  # a writable directory, not noexec (git's askpass runs there)
            return ["--tmpfs", f"{path}:exec,mode=1777"]
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]  # kept across pods
            return ["-v", f"{self.claims}{claim}:{path}"]
        sources = ([{"secret": volume["secret"]}] if "secret" in volume
                   else volume.get("projected", {}).get("sources"))
        assert sources is not None, f"volume {volume['name']}: not a kind the kubelet here runs"
        directory = self.workdir / pod / volume["name"]
        directory.mkdir(parents=True)
        directory.chmod(0o755)
        for source in sources:
            secret = source["secret"]
            name = secret.get("secretName") or secret["name"]
            data = self.secrets.get(name)
            if data is None:
                assert secret.get("optional"), f"Secret {name} does not exist (the pod would " \
                    "wait in ContainerCreating)"
                continue
            items = secret.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                if item["key"] not in data:
                    assert secret.get("optional"), f"Secret {name} has no key {item['key']}"
                    continue
                file = directory / item["path"]
                file.write_text(data[item["key"]])
                file.chmod(0o644)  # the kubelet's defaultMode
        return ["-v", f"{directory}:{path}:ro"]

    def _env(self, var: dict[str, Any], pod: str, secret_env: dict[str, str]) -> list[str]:
        if "value" in var:
            return ["-e", f"{var['name']}={var['value']}"]
        source = var["valueFrom"]
        if "fieldRef" in source:
            field_path = source["fieldRef"]["fieldPath"]
            value = {"metadata.namespace": self.namespace, "metadata.name": pod}[field_path]
            return ["-e", f"{var['name']}={value}"]
        ref = source["secretKeyRef"]
        secret_env[var["name"]] = self.secrets[ref["name"]][ref["key"]]
        return ["-e", var["name"]]

    def _service_account(self, pod: str) -> list[str]:
        assert self.service_account is not None
        account = self.service_account
        directory = self.workdir / pod / "serviceaccount"
        directory.mkdir(parents=True)
        directory.chmod(0o755)
        for file, text in (("token", account.token), ("ca.crt", account.ca.read_text()),
                           ("namespace", self.namespace)):
            (directory / file).write_text(text)
            (directory / file).chmod(0o644)
        return ["-v", f"{directory}:{SERVICE_ACCOUNT}:ro",
                "-e", f"KUBERNETES_SERVICE_HOST={account.host}",
                "-e", f"KUBERNETES_SERVICE_PORT={account.port}"]


def shown(argv: list[str]) -> str:
    """The command line, for an assertion's message."""
    return shlex.join(["docker", "run", *argv])


def environment(secret_env: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **secret_env}
