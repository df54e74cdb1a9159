#!/usr/bin/env python3
"""Fails (exit 1), listing each offending include, when a file includes across a layer
boundary the design forbids (docs/design.md, "Layers"). One rule per line in RULES:
(folder the rule covers, regular expression an include line must not match, files exempt
(a path ending in '/' exempts a folder), why). Run from anywhere: paths are relative to the repository root."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = (".h", ".cc", ".cu", ".cuh")

RULES = [
    ("csrc/transport", r'"(coordination|fusion|core)/', (),
     "the transport layer knows neither the negotiation, the fusion planner nor the core"),
    ("csrc", r'"horovod_cpp/api\.h"', ("csrc/api.cc",),
     "internals take public types from horovod_cpp/options.h, not the API facade"),
    ("csrc", r'[<"]mpi\.h[">]|"transport/mpi/', ("csrc/transport/mpi/", "csrc/transport/factory/"),
     "only the MPI controller (transport/mpi) and the MPI world name MPI: the other transports "
     "get their peers through a Bootstrap"),
]

INCLUDE = re.compile(r'^\s*#\s*include\s*(["<][^">]+[">])')


def offenders(root):
    """Yields 'path:line: #include X (why)' for every include that breaks a rule."""
    for folder, pattern, exempt, why in RULES:
        bad = re.compile(pattern)
        for path in sorted((root / folder).rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.suffix not in SOURCES or any(
                    rel == e or (e.endswith("/") and rel.startswith(e)) for e in exempt):
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if m and bad.search(m.group(1)):
                    yield f"{rel}:{number}: #include {m.group(1)} ({why})"


def main():
    root = pathlib.Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    found = list(offenders(root))
    for line in found:
        print(line)
    if found:
        print(f"check_layers: {len(found)} include(s) across a layer boundary", file=sys.stderr)
        return 1
    print("check_layers: no include crosses a layer boundary")
    return 0


if __name__ == "__main__":
    sys.exit(main())
