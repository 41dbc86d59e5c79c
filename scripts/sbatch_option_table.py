#!/usr/bin/env python3
"""Print sbatch's option table, read from Slurm's source, as the data of
slurmtopo/sbatch/slurm_options.py.

sbatch builds its getopt_long table from ``common_options[]`` in
src/common/slurm_opt.c: every entry with a name and a ``set_func`` (all
commands) or a ``set_func_sbatch``; an entry whose ``val`` is a character is
also a short option. This script reads those entries from each Slurm
release given and prints one line per (option, argument, val) with the
releases that have it, sorted, so a new release is one run and a reviewed
diff::

    python3 scripts/sbatch_option_table.py \\
        22.05=git:/path/to/slurm.git@slurm-22-05-8-1 \\
        25.11=/work/shared/slurm/slurm-25.11.7.tar.gz \\
        26.05=/path/to/slurm-26.05.3/        > table.txt

A source is a release tarball, an unpacked source tree, or ``git:REPO@TAG``.
Paste the output into OPTIONS of slurmtopo/sbatch/slurm_options.py and
update its SOURCE line (the releases and tags read).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Dict, List, Tuple

OPT_FILE = "src/common/slurm_opt.c"
ARG = {"no_argument": "NO", "required_argument": "REQUIRED", "optional_argument": "OPTIONAL"}


def read_source(spec: str) -> str:
    if spec.startswith("git:"):
        repo, _, tag = spec[4:].rpartition("@")
        return subprocess.run(["git", "-C", repo, "show", f"{tag}:{OPT_FILE}"], check=True,
                              capture_output=True, text=True).stdout
    path = Path(spec)
    if path.is_dir():
        return (path / OPT_FILE).read_text()
    with tarfile.open(path) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/" + OPT_FILE))
        return tar.extractfile(member).read().decode()


def sbatch_options(text: str) -> List[Tuple[str, str, str]]:
    """(name, NO|REQUIRED|OPTIONAL, val) of every option sbatch accepts."""
    structs: Dict[str, Dict[str, str]] = {}
    for m in re.finditer(r"static (?:const )?slurm_cli_opt_t (slurm_opt_\w+) = \{(.*?)\};",
                         text, re.S):
        structs[m.group(1)] = {k: v.strip() for k, v in
                               re.findall(r"\.(\w+)\s*=\s*([^,\n]+),?", m.group(2))}
    table = re.search(r"common_options\[\] = \{(.*?)\};", text, re.S)
    if table is None:
        raise SystemExit("no common_options[] in the source")
    out = []
    for ref in re.findall(r"&(slurm_opt_\w+)", table.group(1)):
        f = structs[ref]
        if f.get("name", "NULL") == "NULL":
            continue  # environment-only settings
        if "set_func" not in f and "set_func_sbatch" not in f:
            continue  # salloc/srun/scrontab only
        val = f["val"]
        val = json.loads(val.replace("'", '"')) if val.startswith("'") else val
        out.append((json.loads(f["name"]), ARG[f["has_arg"]], val))
    return out


def main(argv: List[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    releases = {}
    for item in argv:
        version, _, spec = item.partition("=")
        releases[version] = sbatch_options(read_source(spec))
    rows: Dict[Tuple[str, str, str], List[str]] = {}
    for version, options in releases.items():
        for row in options:
            rows.setdefault(row, []).append(version)
    for (name, arg, val), versions in sorted(rows.items()):
        print(f"    ({name!r}, {arg}, {val!r}, {tuple(versions)!r}),".replace("'", '"'))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
