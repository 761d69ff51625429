"""Cold import of each Lambda handler from the runtime layer, as a ratio to boto3's.

Builds a twin of the runtime layer with layers/runtime/Makefile itself (same
requirements, same pruning, same python3.13 bytecode) for this machine's
architecture, since the deployed layer is arm64 wheels, and the functions'
code with functions/Makefile, then imports each handler module in a fresh
python3.13 process with the layer and the functions on sys.path, and
`import boto3` the same way, in one run: each round imports every subject
once, so a machine busier in one part of the run weighs on all of them alike.
Prints the median import time of each, its ratio to boto3's, and the unzipped
size of the layer (the deployed arm64 one from `make build` when present, and
the twin).

The floor is what every handler needs at import, whatever it trims: botocore's
session (every AWS client is botocore's; the handlers never import boto3,
stores/aws_clients.py), Powertools' logger and metrics, and the store's
records, whose pydantic models each handler validates (its event, every run
it reads). A handler cannot import less than that without moving the same
work into its first invocation, which a cold start waits for just the same.

    python bench/layer_cold_import.py [--rounds 7] [--layer DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLOOR = ("floor (botocore, records, Powertools)",
         "botocore.session, stores.records, aws_lambda_powertools.logging, "
         "aws_lambda_powertools.metrics")
HANDLERS = {
    "Advance/Start (functions.step.app)": "functions.step.app",
    "Reconciler (functions.reconciler.app)": "functions.reconciler.app",
    "API (functions.api.app)": "functions.api.app",
    "Retention (functions.retention.app)": "functions.retention.app",
}
DEPLOYED_LAYER = REPO / ".aws-sam" / "build" / "RuntimeLayer" / "python"
# What the handlers read at import: set as template.yaml sets them.
ENVIRONMENT = {"AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
               "POWERTOOLS_SERVICE_NAME": "bench", "POWERTOOLS_METRICS_NAMESPACE": "Bench",
               "AGENT_RUNTIME_STORE": "runs?bucket=blobs&kms_key=alias/bench",
               "PYTHONDONTWRITEBYTECODE": "1"}
PROBE = ("import time; start = time.perf_counter(); import {module}; "
         "print(time.perf_counter() - start)")


def python313() -> str:
    """python3.13 (as the layer's Makefile finds it), else the closest: this interpreter."""
    candidates = [shutil.which("python3.13") or ""]
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True,
                              check=False).stdout.strip()
        candidates += sorted(str(path) for path in
                             Path(root).glob("versions/3.13*/bin/python3.13"))
    check = "import sys; assert sys.version_info[:2] == (3, 13)"
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", check], capture_output=True, check=False)
        if probe.returncode == 0:
            return candidate
    return sys.executable


def build_twin(into: Path, python: str) -> Path:
    """The runtime layer for this machine, built by its own Makefile into `into`."""
    machine = "x86_64" if platform.machine() in ("x86_64", "AMD64") else "aarch64"
    platforms = f"--platform manylinux2014_{machine} --platform manylinux_2_28_{machine}"
    subprocess.run(["make", "-s", "-C", str(into), "-f", str(REPO / "layers/runtime/Makefile"),
                    "build-RuntimeLayer", f"ARTIFACTS_DIR={into}", f"PLATFORMS={platforms}",
                    f"PY313={python}", f"PYTHON={sys.executable}"], check=True)
    return into / "python"


def build_functions(into: Path, python: str) -> Path:
    """The functions' code, built by their own Makefile into `into` (one target: every
    function's code is the same package)."""
    subprocess.run(["make", "-s", "-C", str(REPO / "functions"), "build-ApiFunction",
                    f"ARTIFACTS_DIR={into}", f"PY313={python}"], check=True)
    return into


def size_of(directory: Path) -> tuple[int, int, int]:
    """(bytes, .py files, .py files with a cpython-313 .pyc) under `directory`."""
    total = sources = compiled = 0
    for path in directory.rglob("*"):
        if path.is_file():
            total += path.stat().st_size
            if path.suffix == ".py":
                sources += 1
                cache = path.parent / "__pycache__" / f"{path.stem}.cpython-313.pyc"
                compiled += cache.exists()
    return total, sources, compiled


def import_times(python: str, modules: list[str], path: list[Path],
                 rounds: int) -> list[float]:
    """The median time to import each of `modules` in a fresh process, interleaved."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **ENVIRONMENT,
           "PYTHONPATH": os.pathsep.join(str(entry) for entry in path)}
    times: list[list[float]] = [[] for _ in modules]
    for _ in range(rounds):
        for module, taken in zip(modules, times, strict=True):
            done = subprocess.run([python, "-c", PROBE.format(module=module)], env=env,
                                  capture_output=True, text=True, check=False,
                                  cwd=tempfile.gettempdir())
            if done.returncode != 0:
                raise SystemExit(f"import {module} failed:\n{done.stderr[-2000:]}")
            taken.append(float(done.stdout.strip().splitlines()[-1]))
    return [statistics.median(taken) for taken in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--layer", type=Path,
                        help="a layer's python/ directory built for this machine (default: "
                        "build a twin of the runtime layer)")
    args = parser.parse_args()
    python = python313()
    version = subprocess.run([python, "--version"], capture_output=True, text=True,
                             check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="layer-bench-") as scratch:
        layer = args.layer or build_twin(Path(scratch), python)
        # The functions' code as sam build ships it (functions/Makefile: its .py
        # files and their python3.13 bytecode), then the layer: never the
        # repository's own packages.
        code = build_functions(Path(scratch) / "code", python)
        path = [code, layer]
        subjects = {"import boto3": "boto3", FLOOR[0]: FLOOR[1], **HANDLERS}
        medians = import_times(python, list(subjects.values()), path, args.rounds)
        baseline = medians[0]
        print(f"cold import from the runtime layer, {version}, median of {args.rounds} "
              f"fresh processes (ratio to `import boto3` from the same layer)")
        for name, seconds in zip(subjects, medians, strict=True):
            print(f"  {name:<48} {seconds * 1000:8.1f} ms   {seconds / baseline:.2f}")
        for label, directory in (("deployed layer (arm64, make build)", DEPLOYED_LAYER),
                                 (f"measured twin ({platform.machine()})", layer)):
            if directory.is_dir():
                total, sources, compiled = size_of(directory)
                print(f"  {label}: {total / 1e6:.1f} MB unzipped; {compiled} of {sources} "
                      ".py files have python3.13 bytecode")
            else:
                print(f"  {label}: not built (run make build)")


if __name__ == "__main__":
    main()
