"""The one stand-in for Slurm's command-line tools in the unit tests.

``sinfo``, ``squeue``, ``scontrol``, ``sbatch`` and ``scancel`` become
small executables in a directory put first on ``PATH``: each records its
argv (and ``sbatch``'s stdin) in ``calls.jsonl`` and answers by the first
rule whose prefix matches its command line (the text or exit code a real
Slurm gives, most often a recorded output under tests/fixtures/slurm/), or
fails like Slurm with a "no rule" error, so a test never passes on a
command it did not expect. slurmtopo runs them exactly as it runs the real
ones (the CLI backend, the agent's drain through the backend), which is
what makes the stand-in faithful: the code under test is the production
path down to the subprocess.

One rule is stateful (:meth:`SlurmCommands.keep_node_reasons`): ``scontrol
update NodeName=N State=DRAIN Reason=R`` stores R, ``State=RESUME`` clears
it, and ``scontrol show node N`` prints the node with its ``Reason=``, as
the agent's health watch needs to tell its own drains from an admin's.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import List, Optional

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
COMMANDS = ("sinfo", "squeue", "scontrol", "sbatch", "scancel", "sacct")

STANDIN = r'''#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
name = os.path.basename(sys.argv[0])
args = sys.argv[1:]
stdin = sys.stdin.read() if name == "sbatch" else None
with open(os.path.join(here, "calls.jsonl"), "a") as f:
    f.write(json.dumps({{"argv": [name] + args, "stdin": stdin}}) + "\n")
rules = json.load(open(os.path.join(here, "rules.json")))
key = " ".join([name] + args)


def node_reasons():
    path = os.path.join(here, "reasons.json")
    reasons = json.load(open(path)) if os.path.exists(path) else {{}}
    if args[:2] == ["show", "node"] and len(args) > 2:
        print("NodeName=%s Arch=x86_64 CoresPerSocket=56" % args[2])
        print("   State=IDLE+DRAIN ThreadsPerCore=2")
        reason = reasons.get(args[2], reasons.get("*"))
        if reason:
            print("   Reason=%s [root@2026-01-01T00:00:00]" % reason)
    elif args[:1] == ["update"]:
        kv = dict(a.split("=", 1) for a in args[1:] if "=" in a)
        node = kv.get("NodeName", "*")
        if kv.get("State") == "DRAIN":
            reasons[node] = kv.get("Reason", "")
        elif kv.get("State") == "RESUME":
            reasons.pop(node, None)
            reasons.pop("*", None)
        json.dump(reasons, open(path, "w"))
    sys.exit(0)


for prefix, answer in rules:
    if key.startswith(prefix):
        if answer.get("node_reasons"):
            node_reasons()
        out = answer.get("stdout", "")
        if answer.get("file"):
            out = open(answer["file"]).read()
        sys.stdout.write(out)
        sys.stderr.write(answer.get("stderr", ""))
        sys.exit(answer.get("rc", 0))
sys.stderr.write(f"{{name}}: error: stand-in has no rule for {{key!r}}\n")
sys.exit(1)
'''


class SlurmCommands:
    """The stand-in commands' directory: its rules and the calls they saw."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.rules: list = []
        for name in COMMANDS:
            p = self.path / name
            p.write_text(STANDIN.format(python=sys.executable))
            p.chmod(p.stat().st_mode | stat.S_IEXEC)
        self._save()

    def _save(self) -> None:
        (self.path / "rules.json").write_text(json.dumps(self.rules))

    def on(self, prefix: str, stdout: str = "", stderr: str = "", rc: int = 0,
           file: Optional[str] = None) -> None:
        """Answer command lines starting with ``prefix`` (a later rule wins)."""
        self.rules.insert(0, (prefix, {"stdout": stdout, "stderr": stderr, "rc": rc,
                                       "file": str(FIXTURES / file) if file else None}))
        self._save()

    def off(self, prefix: str) -> None:
        """Drop the latest rule :meth:`on` added for ``prefix``."""
        for i, (p, answer) in enumerate(self.rules):
            if p == prefix and not answer.get("node_reasons"):
                del self.rules[i]
                break
        self._save()

    def keep_node_reasons(self) -> None:
        """``scontrol update ... State=DRAIN/RESUME`` and ``scontrol show
        node`` keep and tell each node's drain reason."""
        self.rules.insert(0, ("scontrol", {"node_reasons": True}))
        self._save()

    def set_reason(self, reason: str, node: str = "*") -> None:
        """A reason set by someone else (an admin), for ``node`` or, by
        default, for every node (replacing the reasons kept so far)."""
        path = self.path / "reasons.json"
        reasons = json.loads(path.read_text()) if path.exists() and node != "*" else {}
        reasons[node] = reason
        path.write_text(json.dumps(reasons))

    def calls(self) -> List[dict]:
        p = self.path / "calls.jsonl"
        return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []

    @property
    def env(self) -> dict:
        return {**os.environ, "PATH": f"{self.path}{os.pathsep}{os.environ.get('PATH', '')}"}
