#!/usr/bin/env python3
"""Walks docs/operations.md's "Uninstall" (§3.2, step 6: each node) on copies of kubeadm node layouts.

For each layout under deploy/tests/kubeadm/<name>/ (the files that decide kubelet's CRI endpoint, as
kubeadm_walk.py uses them), this script:

1. copies the layout into a temporary root and installs the shim there the way §1.2 does
   (`deploy/install-shim.sh --root=ROOT`, with a stand-in binary), with `/run/podward` holding its
   sockets, and points kubelet at the shim with §1.5's repoint block: the node as podward leaves it;
2. runs, as the uninstall says, §1.5's repoint block with the ENDPOINT the uninstall gives, then the
   `<!-- walk: uninstall-node -->` block — node paths prefixed with the root, any other absolute
   path refused — with a stand-in `systemctl` first on PATH that records each call and, like
   systemd, makes `restart kubelet` start kubelet on the endpoint its files name at that moment;
3. checks: kubelet ends up running on containerd, and was already running on containerd when the
   shim's units were stopped (never the shim gone under a kubelet that uses it); both units were
   disabled and stopped (`disable --now`), and systemd reloaded after the unit files went; nothing
   that install-shim.sh or the chart's installer wrote is left (binary, units, settings), nor
   `/run/podward` or a `.bak-podward` copy; no kubelet flag other than the endpoint changed.

Usage: python3 deploy/tests/uninstall_walk.py [--docs FILE] [--layouts DIR]   (exit 0 = every check held)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kubeadm_walk as kw  # noqa: E402

# What install-shim.sh (or the chart's installer) writes on a host, and the shim's socket directory.
SHIM_FILES = [
    "/usr/local/bin/podward-shim",
    "/etc/systemd/system/podward-shim.socket",
    "/etc/systemd/system/podward-shim.service",
    "/etc/default/podward-shim",
]
HOST_PATHS = kw.NODE_PATHS + SHIM_FILES + ["/run/podward"]
UNITS = {"podward-shim.service", "podward-shim.socket"}

# The stand-in systemctl: appends one JSON line per call (its arguments, and kubelet's endpoint as
# the node's files name it at that moment) to $WALK_LOG.
FAKE_SYSTEMCTL = """#!/bin/sh
exec python3 "{script}" --systemctl-call "$WALK_ROOT" "$WALK_LOG" "$@"
"""


def uninstall_endpoint(doc: str) -> str:
    """The ENDPOINT the uninstall's node step gives for §1.5's repoint block."""
    section = doc[doc.index("### 3.2 Uninstall"):] if "### 3.2 Uninstall" in doc else ""
    m = re.search(r"repoint block of §1\.5 with\s+`ENDPOINT=([^`]+)`", section)
    if not m:
        raise kw.WalkError("docs: the uninstall gives no `ENDPOINT=...` for §1.5's repoint block")
    return m.group(1)


def rooted(block: str, root: Path) -> str:
    """The block with every host path it may touch prefixed with `root`; any other refused."""
    out = block
    for p in sorted(HOST_PATHS, key=len, reverse=True):
        out = re.sub(r"(?<![\w/:])" + re.escape(p) + r"(?![\w-])", str(root) + p, out)
    for m in re.finditer(r"(?<![\w/:.])/[\w.*-]+(?:/[\w.*-]+)*", out):
        path = m.group(0)
        if path.startswith(str(root)) or path == "/dev/null":
            continue
        raise kw.WalkError(f"docs block touches {path}, which the walk does not know how to redirect")
    return out


def systemctl_call(root: str, log: str, args: list[str]) -> int:
    with open(log, "a") as f:
        units = any((Path(root) / u.lstrip("/")).exists() for u in SHIM_FILES[1:3])
        f.write(json.dumps({"args": args, "kubelet_files": kw.effective_endpoint(Path(root)),
                            "units_present": units}) + "\n")
    return 0


def run(script: str, env: dict[str, str]) -> None:
    res = subprocess.run(["sh", "-eu", "-c", script], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise kw.WalkError(f"block failed ({res.returncode}):\n{script}\n{res.stderr}")


def install_shim(root: Path, tmp: Path) -> None:
    payload = tmp / "podward-shim"
    payload.write_text("#!/bin/sh\nexit 0\n")
    payload.chmod(0o755)
    res = subprocess.run(["sh", str(kw.REPO / "deploy/install-shim.sh"), f"--root={root}",
                          f"--binary={payload}", "--no-systemctl"], capture_output=True, text=True)
    if res.returncode != 0:
        raise kw.WalkError(f"install-shim.sh failed: {res.stderr}")
    (root / "run/podward").mkdir(parents=True, exist_ok=True)
    for sock in ("cri.sock", "shim.sock", "prober.sock", "housekeeper.sock"):
        (root / "run/podward" / sock).touch()


def check_layout(layout: Path, repoint: str, node_block: str, endpoint: str) -> list[str]:
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="podward-uninstall-walk-") as t:
        tmp = Path(t)
        root = tmp / "node"
        shutil.copytree(layout, root, symlinks=True)
        other_before = kw.without_flag(kw.kubelet_args(root), kw.FLAG)
        install_shim(root, tmp)
        kw.run_sh(kw.rooted(repoint, root))
        if kw.effective_endpoint(root) != kw.SHIM:
            return ["the install state could not be set up: kubelet is not on the shim"]

        bindir = tmp / "bin"
        bindir.mkdir()
        fake = bindir / "systemctl"
        fake.write_text(FAKE_SYSTEMCTL.format(script=Path(__file__).resolve()))
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        log = tmp / "systemctl.log"
        env = dict(os.environ, PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                   WALK_ROOT=str(root), WALK_LOG=str(log))

        script = re.sub(r"^ENDPOINT=.*$", f"ENDPOINT={endpoint}", repoint, count=1, flags=re.M)
        run(kw.rooted(script, root) + "\n" + rooted(node_block, root), env)

        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        running = kw.SHIM  # kubelet runs on what it read at its last start: the shim, so far
        stopped_units: set[str] = set()
        reloaded_after_removal = False
        for c in calls:
            args = c["args"]
            if args[:1] == ["restart"] and ({"kubelet", "kubelet.service"} & set(args[1:])):
                running = c["kubelet_files"]
            stops = [a for a in args[1:] if a in UNITS]
            if stops and (args[:1] == ["stop"] or args[:2] == ["disable", "--now"]):
                if running != kw.CONTAINERD:
                    failures.append(f"systemctl {' '.join(args)} while kubelet runs on {running}")
                if args[:2] == ["disable", "--now"]:
                    stopped_units |= set(stops)
            if args[:1] == ["daemon-reload"] and not c["units_present"]:
                reloaded_after_removal = True
        if running != kw.CONTAINERD:
            failures.append(f"kubelet was never restarted on containerd (it runs on {running})")
        if stopped_units != UNITS:
            failures.append(f"not disabled and stopped: {sorted(UNITS - stopped_units)}")
        if not reloaded_after_removal:
            failures.append("no systemctl daemon-reload after the unit files were removed")
        left = [f for f in SHIM_FILES + ["/run/podward"] if (root / f.lstrip("/")).exists()]
        left += [str(b.relative_to(root)) for b in root.rglob("*.bak-podward")]
        if left:
            failures.append(f"left on the host: {left}")
        if kw.effective_endpoint(root) != kw.CONTAINERD:
            failures.append(f"kubelet's files name {kw.effective_endpoint(root)}, not {kw.CONTAINERD}")
        if kw.without_flag(kw.kubelet_args(root), kw.FLAG) != other_before:
            failures.append("the uninstall changed other kubelet flags")
        print(f"{layout.name}: kubelet {kw.SHIM} -> {running}, {len(calls)} systemctl call(s)")
    return failures


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--systemctl-call":
        return systemctl_call(sys.argv[2], sys.argv[3], sys.argv[4:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", default=str(kw.REPO / "docs/operations.md"))
    parser.add_argument("--layouts", default=str(Path(__file__).resolve().parent / "kubeadm"))
    args = parser.parse_args()
    try:
        doc = Path(args.docs).read_text()
        repoint = kw.doc_block(doc, "repoint")
        node_block = kw.doc_block(doc, "uninstall-node")
        endpoint = uninstall_endpoint(doc)
        if endpoint != kw.CONTAINERD:
            raise kw.WalkError(f"docs: the uninstall's ENDPOINT is {endpoint}, not {kw.CONTAINERD}")
        layouts = sorted(p for p in Path(args.layouts).iterdir() if p.is_dir())
        failed = 0
        for layout in layouts:
            for f in check_layout(layout, repoint, node_block, endpoint):
                print(f"FAIL {layout.name}: {f}")
                failed += 1
    except kw.WalkError as e:
        print(f"FAIL: {e}")
        return 1
    print(f"uninstall walk: {len(layouts)} layout(s), {failed} failure(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
