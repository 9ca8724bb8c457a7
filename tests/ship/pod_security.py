"""Kubernetes' Pod Security Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/),
the `baseline` and `restricted` rules as Pod Security admission enforces them (1.30 and later),
checked against a pod spec: what the tests of the pods gitscale runs, and of the runner pod
templates its docs show, use to say which level a pod meets.

Each rule is a function of the pod spec (and its annotations) giving the fields that break it,
named by their path; a pod meets a level when no rule of that level, or of a lower one, names
one. The checks follow the policy table of that page, field by field; what admission does not
check (a field absent where the rule allows it unset) is allowed here too.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

Level = Literal["privileged", "baseline", "restricted"]
LEVELS: tuple[Level, ...] = ("privileged", "baseline", "restricted")
Spec = Mapping[str, Any]

# Baseline: the capabilities a container may add (the container runtimes' default set).
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t",
                           "container_engine_t"})
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes"})
# Restricted: the volume types a pod may use.
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                "persistentVolumeClaim", "projected", "secret"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def containers(spec: Spec) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every container of the pod, init and ephemeral ones too, with its path."""
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in enumerate(spec.get(field) or []):
            yield f"spec.{field}[{i}]", container


def _contexts(spec: Spec) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The pod's securityContext and each container's, with their paths."""
    yield "spec.securityContext", spec.get("securityContext") or {}
    for path, container in containers(spec):
        yield f"{path}.securityContext", container.get("securityContext") or {}


# -- baseline ----------------------------------------------------------------------------------
def host_process(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"{path}.windowsOptions.hostProcess" for path, ctx in _contexts(spec)
            if (ctx.get("windowsOptions") or {}).get("hostProcess") is True]


def host_namespaces(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"spec.{f}" for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f) is True]


def privileged(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"{path}.securityContext.privileged" for path, c in containers(spec)
            if (c.get("securityContext") or {}).get("privileged") is True]


def baseline_capabilities(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"{path}.securityContext.capabilities.add: {cap}" for path, c in containers(spec)
            for cap in ((c.get("securityContext") or {}).get("capabilities") or {}).get("add")
            or [] if cap not in BASELINE_CAPABILITIES]


def host_path_volumes(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"spec.volumes[{i}].hostPath" for i, v in enumerate(spec.get("volumes") or [])
            if "hostPath" in v]


def host_ports(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"{path}.ports[{i}].hostPort" for path, c in containers(spec)
            for i, port in enumerate(c.get("ports") or []) if port.get("hostPort")]


def apparmor(spec: Spec, annotations: Mapping[str, str]) -> list[str]:
    found = [f"metadata.annotations[{k}]" for k, v in annotations.items()
             if k.startswith(APPARMOR_ANNOTATION) and v != "runtime/default"
             and not v.startswith("localhost/")]
    return found + [f"{path}.appArmorProfile" for path, ctx in _contexts(spec)
                    if (ctx.get("appArmorProfile") or {}).get("type")
                    not in (None, "RuntimeDefault", "Localhost")]


def selinux(spec: Spec, _: Mapping[str, str]) -> list[str]:
    found = []
    for path, ctx in _contexts(spec):
        options = ctx.get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES or options.get("user") \
                or options.get("role"):
            found.append(f"{path}.seLinuxOptions")
    return found


def proc_mount(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"{path}.securityContext.procMount" for path, c in containers(spec)
            if (c.get("securityContext") or {}).get("procMount") not in (None, "Default")]


def seccomp_not_unconfined(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"{path}.seccompProfile" for path, ctx in _contexts(spec)
            if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined"]


def sysctls(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"spec.securityContext.sysctls: {s.get('name')}"
            for s in (spec.get("securityContext") or {}).get("sysctls") or []
            if s.get("name") not in SAFE_SYSCTLS]


# -- restricted --------------------------------------------------------------------------------
def volume_types(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"spec.volumes[{i}].{kind}" for i, v in enumerate(spec.get("volumes") or [])
            for kind in v if kind != "name" and kind not in RESTRICTED_VOLUMES]


def privilege_escalation(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"{path}.securityContext.allowPrivilegeEscalation" for path, c in containers(spec)
            if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False]


def run_as_non_root(spec: Spec, _: Mapping[str, str]) -> list[str]:
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    found = []
    for path, c in containers(spec):
        own = (c.get("securityContext") or {}).get("runAsNonRoot")
        if own is False or (own is None and pod is not True):
            found.append(f"{path}.securityContext.runAsNonRoot")
    return found + (["spec.securityContext.runAsNonRoot"] if pod is False else [])


def run_as_user(spec: Spec, _: Mapping[str, str]) -> list[str]:
    return [f"{path}.runAsUser" for path, ctx in _contexts(spec) if ctx.get("runAsUser") == 0]


def seccomp(spec: Spec, _: Mapping[str, str]) -> list[str]:
    allowed = ("RuntimeDefault", "Localhost")
    pod = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    found = [] if pod in (None, *allowed) else ["spec.securityContext.seccompProfile"]
    for path, c in containers(spec):
        own = ((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
        if (own is None and pod is None) or own not in (None, *allowed):
            found.append(f"{path}.securityContext.seccompProfile")
    return found


def restricted_capabilities(spec: Spec, _: Mapping[str, str]) -> list[str]:
    found = []
    for path, c in containers(spec):
        caps = (c.get("securityContext") or {}).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            found.append(f"{path}.securityContext.capabilities.drop")
        found += [f"{path}.securityContext.capabilities.add: {cap}"
                  for cap in caps.get("add") or [] if cap != "NET_BIND_SERVICE"]
    return found


Rule = Callable[[Spec, Mapping[str, str]], list[str]]
RULES: dict[Level, tuple[Rule, ...]] = {
    "privileged": (),
    "baseline": (host_process, host_namespaces, privileged, baseline_capabilities,
                 host_path_volumes, host_ports, apparmor, selinux, proc_mount,
                 seccomp_not_unconfined, sysctls),
    "restricted": (volume_types, privilege_escalation, run_as_non_root, run_as_user, seccomp,
                   restricted_capabilities),
}


def violations(spec: Spec, level: Level,
               annotations: Mapping[str, str] | None = None) -> list[str]:
    """The fields of the pod spec that keep it from ``level`` (empty: it meets it)."""
    upto = LEVELS[:LEVELS.index(level) + 1]
    return [f"{rule.__name__}: {field}" for lvl in upto for rule in RULES[lvl]
            for field in rule(spec, annotations or {})]


def level(spec: Spec, annotations: Mapping[str, str] | None = None) -> Level:
    """The strictest level the pod meets."""
    return next(lvl for lvl in reversed(LEVELS) if not violations(spec, lvl, annotations))


def pod_templates(obj: Mapping[str, Any]) -> list[tuple[Spec, Mapping[str, str]]]:
    """The pod specs (and their annotations) of a workload object: a Pod, a Deployment, a
    StatefulSet, a DaemonSet, a ReplicaSet, a Job or a CronJob; none of any other kind."""
    kind = obj.get("kind")
    if kind == "Pod":
        template: Mapping[str, Any] = obj
    elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        template = obj["spec"]["template"]
    elif kind == "CronJob":
        template = obj["spec"]["jobTemplate"]["spec"]["template"]
    else:
        return []
    return [(template["spec"], (template.get("metadata") or {}).get("annotations") or {})]
