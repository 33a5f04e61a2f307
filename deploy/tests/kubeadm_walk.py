#!/usr/bin/env python3
"""Walks docs/operations.md's "Point kubelet at the shim" on copies of kubeadm node layouts.

For each layout under deploy/tests/kubeadm/<name>/ (a tree of the files that decide kubelet's CRI
endpoint: kubeadm-flags.env, /etc/default|sysconfig/kubelet, config.yaml, instance-config.yaml and the
10-kubeadm.conf drop-in), this script:

1. copies the layout into a temporary root;
2. runs the doc's `<!-- walk: repoint -->` block exactly as written, except that the node paths in
   it (/var/lib/kubelet, /etc/default/kubelet, /etc/sysconfig/kubelet) are prefixed with the root;
3. works out the endpoint kubelet would use, the way kubelet does: the drop-in's ExecStart, its
   Environment= and EnvironmentFile= expanded, the LAST --container-runtime-endpoint wins; with no
   flag, `containerRuntimeEndpoint` of the --config file; with neither, kubelet's default;
4. checks: kubelet would use the shim; every place that sets the endpoint (flags, config.yaml,
   instance-config.yaml, which kubeadm >= 1.34 rebuilds config.yaml from) names the shim; no other
   flag changed; the `<!-- walk: check -->` block prints only lines naming the shim, at least one;
5. runs the repoint block again with ENDPOINT set to the rollback value the doc gives, and checks
   that kubelet would use containerd again, still with no other flag changed.

Usage: python3 deploy/tests/kubeadm_walk.py [--docs FILE] [--layouts DIR]   (exit 0 = every check held)
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SHIM = "unix:///run/podward/cri.sock"
CONTAINERD = "unix:///run/containerd/containerd.sock"
# kubelet's default when neither a flag nor the config sets it (KubeletConfiguration defaults, Linux).
KUBELET_DEFAULT = CONTAINERD
# The node files the doc's blocks may touch; any other absolute path in a block is refused.
NODE_PATHS = ["/var/lib/kubelet", "/etc/default/kubelet", "/etc/sysconfig/kubelet"]
DROPIN_DIRS = ["etc/systemd/system/kubelet.service.d", "usr/lib/systemd/system/kubelet.service.d"]
FLAG = "--container-runtime-endpoint"


class WalkError(Exception):
    pass


def doc_block(doc: str, name: str) -> str:
    """The fenced block right after `<!-- walk: NAME ... -->`."""
    m = re.search(r"<!-- walk: " + re.escape(name) + r"\b[^>]*-->\s*```sh\n(.*?)```", doc, re.S)
    if not m:
        raise WalkError(f"docs: no ```sh block after <!-- walk: {name} -->")
    return m.group(1)


def rollback_endpoint(doc: str) -> str:
    m = re.search(r"Roll back\*\*.*?`ENDPOINT=([^`]+)`", doc, re.S)
    if not m:
        raise WalkError("docs: the rollback paragraph gives no `ENDPOINT=...`")
    return m.group(1)


def rooted(block: str, root: Path) -> str:
    """Prefixes the node paths of a block with `root`, refusing any other absolute file path."""
    out = block
    for p in NODE_PATHS:
        out = re.sub(r"(?<![\w/:])" + re.escape(p), str(root) + p, out)
    # What is left that looks like an absolute path must be an endpoint value or /dev/null.
    for m in re.finditer(r"(?<![\w/:.])/[\w.-]+(?:/[\w.-]+)*", out):
        path = m.group(0)
        if path.startswith(str(root)) or path == "/dev/null":
            continue
        raise WalkError(f"docs block touches {path}, which the walk does not know how to redirect")
    return out


def run_sh(script: str, env_endpoint: str | None = None, strict: bool = True) -> str:
    """Runs a block with sh. `strict`: under `set -eu`, and it must exit 0 (the repoint block);
    otherwise as pasted into an interactive shell, where grep's "no match" or "no such file"
    (exit 1 or 2) are answers, not failures (the check block)."""
    if env_endpoint is not None:
        script = re.sub(r"^ENDPOINT=.*$", f"ENDPOINT={env_endpoint}", script, count=1, flags=re.M)
    res = subprocess.run(["sh", "-eu" if strict else "-u", "-c", script], capture_output=True, text=True)
    if res.returncode != 0 and (strict or res.returncode > 2):
        raise WalkError(f"block failed ({res.returncode}):\n{script}\n{res.stderr}")
    return res.stdout


def env_file_vars(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a systemd EnvironmentFile (as sh would read these simple files)."""
    if not path.is_file():
        return {}
    out = subprocess.run(["sh", "-c", 'set -a; . "$1"; env -0', "sh", str(path)],
                         capture_output=True, text=True, check=True).stdout
    base = subprocess.run(["sh", "-c", "env -0"], capture_output=True, text=True, check=True).stdout
    before = dict(kv.split("=", 1) for kv in base.split("\0") if "=" in kv)
    after = dict(kv.split("=", 1) for kv in out.split("\0") if "=" in kv)
    return {k: v for k, v in after.items() if before.get(k) != v}


def kubelet_args(root: Path) -> list[str]:
    """kubelet's command line as systemd would build it from the kubeadm drop-in."""
    dropin = next((root / d / "10-kubeadm.conf" for d in DROPIN_DIRS
                   if (root / d / "10-kubeadm.conf").is_file()), None)
    if dropin is None:
        raise WalkError(f"{root}: no 10-kubeadm.conf")
    env: dict[str, str] = {}
    exec_start = ""
    for line in dropin.read_text().splitlines():
        line = line.strip()
        if line.startswith("Environment="):
            for assignment in shlex.split(line[len("Environment="):]):
                k, _, v = assignment.partition("=")
                env[k] = v
        elif line.startswith("EnvironmentFile="):
            path = line[len("EnvironmentFile="):].lstrip("-")
            env.update(env_file_vars(root / path.lstrip("/")))
        elif line.startswith("ExecStart=") and line != "ExecStart=":
            exec_start = line[len("ExecStart="):]
    args: list[str] = []
    for word in exec_start.split()[1:]:
        # systemd splits an unbraced $VAR at whitespace into separate arguments.
        args.extend(env.get(word[1:], "").split() if word.startswith("$") else [word])
    return args


def flag_values(args: list[str], flag: str) -> list[str]:
    out = []
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            out.append(args[i + 1])
        elif a.startswith(flag + "="):
            out.append(a.split("=", 1)[1])
    return out


def without_flag(args: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        elif not a.startswith(flag + "="):
            out.append(a)
    return out


def config_endpoint(path: Path) -> str | None:
    if not path.is_file():
        return None
    data = yaml.safe_load(path.read_text()) or {}
    return data.get("containerRuntimeEndpoint") or None


def effective_endpoint(root: Path) -> str:
    args = kubelet_args(root)
    flags = flag_values(args, FLAG)
    if flags:
        return flags[-1]
    config = flag_values(args, "--config")
    if config:
        value = config_endpoint(root / config[-1].lstrip("/"))
        if value:
            return value
    return KUBELET_DEFAULT


def every_setting(root: Path) -> dict[str, str]:
    """Every place on the node that sets the endpoint: flag sources and both config files."""
    found = {}
    for rel in ["var/lib/kubelet/kubeadm-flags.env", "etc/default/kubelet", "etc/sysconfig/kubelet"]:
        p = root / rel
        for var, value in env_file_vars(p).items():
            for v in flag_values(value.split(), FLAG):
                found[f"/{rel} {var}"] = v
    for rel in ["var/lib/kubelet/config.yaml", "var/lib/kubelet/instance-config.yaml"]:
        value = config_endpoint(root / rel)
        if value:
            found[f"/{rel}"] = value
    return found


def check_layout(layout: Path, repoint: str, check: str, rollback: str) -> list[str]:
    """Walks one layout; returns the failures (empty = every check held)."""
    failures = []
    with tempfile.TemporaryDirectory(prefix="podward-kubeadm-walk-") as tmp:
        root = Path(tmp) / "node"
        shutil.copytree(layout, root, symlinks=True)
        before = effective_endpoint(root)
        other_before = without_flag(kubelet_args(root), FLAG)
        if before == SHIM:
            failures.append("the layout already uses the shim: it proves nothing")

        run_sh(rooted(repoint, root))
        after = effective_endpoint(root)
        if after != SHIM:
            failures.append(f"after the repoint step kubelet would still use {after}")
        stale = {k: v for k, v in every_setting(root).items() if v != SHIM}
        if stale:
            failures.append(f"after the repoint step these still name another endpoint: {stale}")
        if without_flag(kubelet_args(root), FLAG) != other_before:
            failures.append("the repoint step changed other kubelet flags:\n"
                            f"  before {other_before}\n  after  {without_flag(kubelet_args(root), FLAG)}")
        printed = [line for line in run_sh(rooted(check, root), strict=False).splitlines() if line.strip()]
        if not printed:
            failures.append("the check step printed nothing")
        bad = [line for line in printed if not line.rstrip().rstrip('"').endswith(SHIM)]
        if bad:
            failures.append(f"the check step shows lines that do not name the shim: {bad}")
        for backup in root.rglob("*.bak-podward"):
            if not backup.with_name(backup.name[: -len(".bak-podward")]).exists():
                failures.append(f"backup {backup} has no original")

        run_sh(rooted(repoint, root), env_endpoint=rollback)
        back = effective_endpoint(root)
        if back != CONTAINERD:
            failures.append(f"after the rollback kubelet would use {back}, not {CONTAINERD}")
        if without_flag(kubelet_args(root), FLAG) != other_before:
            failures.append("the rollback changed other kubelet flags")
        print(f"{layout.name}: {before} -> {after} -> {back}")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", default=str(REPO / "docs/operations.md"))
    parser.add_argument("--layouts", default=str(Path(__file__).resolve().parent / "kubeadm"))
    args = parser.parse_args()
    try:
        doc = Path(args.docs).read_text()
        repoint, check, rollback = doc_block(doc, "repoint"), doc_block(doc, "check"), rollback_endpoint(doc)
        if not re.search(r"^ENDPOINT=" + re.escape(SHIM) + r"\s*$", repoint, re.M):
            raise WalkError(f"docs: the repoint block must start by setting ENDPOINT={SHIM}")
        if rollback != CONTAINERD:
            raise WalkError(f"docs: rollback ENDPOINT is {rollback}, not {CONTAINERD}")
        layouts = sorted(p for p in Path(args.layouts).iterdir() if p.is_dir())
        if not layouts:
            raise WalkError(f"no layouts in {args.layouts}")
        failed = 0
        for layout in layouts:
            for f in check_layout(layout, repoint, check, rollback):
                print(f"FAIL {layout.name}: {f}")
                failed += 1
    except WalkError as e:
        print(f"FAIL: {e}")
        return 1
    print(f"kubeadm walk: {len(layouts)} layout(s), {failed} failure(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
