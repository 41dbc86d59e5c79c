"""The Slurm backend that runs Slurm's own commands.

Reading: ``scontrol show nodes --json`` (23.02+) or ``sinfo --json``
(22.05) for nodes, GPUs configured and in use,
``squeue --json`` (jobs, GPUs each running job holds per node) and
``scontrol -d -o show job <id>`` (one job, text: 22.05's scontrol has no
``--json``). When a ``--json`` option is missing (Slurm built without the
JSON plugins, or older than 21.08), the same data is read from
``scontrol -d -o show node|job`` text.

Acting: ``sbatch --parsable`` (script on stdin), ``scontrol update``,
``scontrol hold|uhold|release``, ``scancel``.

Every command is run as an argv list, never through a shell, so job names,
comments and node reasons reach Slurm verbatim whatever characters they
hold. ``SLURM_CONF`` and ``PATH`` come from the environment (or ``env=``).
"""
from __future__ import annotations

import os
import re
import subprocess
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence

from slurmtopo.errors import SlurmError
from slurmtopo.slurm import jobrecord, parse
from slurmtopo.slurm.backend import SlurmBackend, SlurmJob, SlurmNode

DEFAULT_TIMEOUT = 60.0
#: seconds ``srun --help`` may take (it answers at once where Slurm is set up)
SRUN_HELP_TIMEOUT = 10.0
_UNASKED = object()
#: job ids of one text listing asked about alone at most (each costs a
#: `scontrol show job ID`); the rest are reported unreadable
MAX_ASKED_ALONE = 64
_LONG_OPTION = re.compile(r"(?<![\w-])(--[A-Za-z][A-Za-z0-9-]*)")


def parse_srun_help(text: str) -> Optional[FrozenSet[str]]:
    """The long options ``srun --help`` lists, or None when ``text`` is
    not srun's help (its own ``--ntasks`` is missing)."""
    found = frozenset(_LONG_OPTION.findall(text))
    return found if "--ntasks" in found else None
_NO_JSON = ("unrecognized option", "invalid option", "unknown option", "plugin", "json")


class CliBackend(SlurmBackend):
    name = "cli"

    def __init__(self, env: Optional[Mapping[str, str]] = None, timeout: float = DEFAULT_TIMEOUT,
                 json: Optional[bool] = None):
        self.env = dict(env) if env is not None else None
        self.timeout = timeout
        #: None: try --json, fall back to scontrol text once it fails
        self._json = json
        #: --json commands this Slurm lacks (tried once, then skipped)
        self._unsupported: set = set()
        #: srun's long options (see srun_options; asked at most once)
        self._srun_options: object = _UNASKED

    # -- running commands ------------------------------------------------
    def run(self, argv: Sequence[str], stdin: Optional[str] = None,
            check: bool = True) -> subprocess.CompletedProcess:
        argv = [str(a) for a in argv]
        for a in argv:
            if "\0" in a:
                raise SlurmError(f"{argv[0]}: an argument holds a NUL byte")
        try:
            # UTF-8 whatever the locale: a job name may be `λ-训练`
            p = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                               encoding="utf-8", errors="replace", env=self.env,
                               timeout=self.timeout)
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]} not found: is Slurm's client installed and on PATH?"
                             ) from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{argv[0]} did not answer within {self.timeout:.0f}s "
                             "(is slurmctld up? SLURM_CONF="
                             f"{(self.env or os.environ).get('SLURM_CONF', 'unset')})") from None
        if check and p.returncode != 0:
            raise SlurmError(parse.error_text(p.stderr, p.stdout, argv[0]))
        return p

    def _json_or_text(self, json_argvs: Sequence[Sequence[str]], text_argv: Sequence[str]):
        """(kind, stdout): the first of ``json_argvs`` that the installed
        Slurm has (``--json`` output), else ``text_argv``'s text."""
        if self._json is not False:
            for i, json_argv in enumerate(json_argvs):
                if tuple(json_argv) in self._unsupported and i < len(json_argvs) - 1:
                    continue
                p = self.run(json_argv, check=False)
                if p.returncode == 0 and p.stdout.lstrip().startswith("{"):
                    self._json = True
                    return "json", p.stdout
                msg = (p.stderr or "").lower()
                unsupported = any(s in msg for s in _NO_JSON)
                if unsupported:
                    self._unsupported.add(tuple(json_argv))
                if not unsupported or (self._json is True and i == len(json_argvs) - 1):
                    raise SlurmError(parse.error_text(p.stderr, p.stdout, json_argv[0]))
            self._json = False
        p = self.run(text_argv, check=False)
        if p.returncode != 0:
            if "no jobs in the system" in (p.stdout + p.stderr).lower():
                return "text", ""
            raise SlurmError(parse.error_text(p.stderr, p.stdout, text_argv[0]))
        return "text", p.stdout

    # -- reading ---------------------------------------------------------
    def nodes(self) -> List[SlurmNode]:
        # ``scontrol show nodes --json`` has one record per node on every
        # version that has it; 22.05's scontrol has no --json, its sinfo
        # --json the same per-node records (24.05+'s sinfo groups nodes).
        kind, out = self._json_or_text([["scontrol", "show", "nodes", "--json"], ["sinfo", "--json"]],
                                       ["scontrol", "-d", "-o", "show", "node"])
        if kind == "json":
            return parse.parse_nodes_json(out)
        return parse.parse_scontrol_nodes(out)

    def jobs(self, states: Optional[Iterable[str]] = None) -> List[SlurmJob]:
        """Every job, from ``squeue --json`` (text only where Slurm has no
        JSON). A record that cannot be read with certainty is an unreadable
        job (:attr:`SlurmJob.unreadable`), never an error for the whole
        listing: one user's job name cannot stop a reader for everyone."""
        kind, out = self._json_or_text([["squeue", "--json"]],
                                       ["scontrol", "-d", "-o", "show", "job"])
        if kind == "json":
            return jobrecord.jobs_from_json(out, "squeue --json", states)
        jobs, ask = jobrecord.jobs_from_text(out, one_liner=True)
        # ids the listing cannot tell apart (a newline and JobId= in
        # someone's job name): each asked for alone, where Slurm prints
        # that job's record only
        for job_id in ask[:MAX_ASKED_ALONE]:
            one = self._job_text(job_id)
            if one is not None:
                jobs.append(one)
        jobs += [jobrecord.unreadable_job(j, "too many records of this listing could not be "
                                             "read")
                 for j in ask[MAX_ASKED_ALONE:]]
        if states is not None:
            want = {s.upper() for s in states}
            jobs = [j for j in jobs if j.state in want or j.unreadable]
        return sorted(jobs, key=lambda j: j.job_id)

    def job(self, job_id: int) -> Optional[SlurmJob]:
        """One job, looked up right now: ``scontrol --json show job ID``
        (23.02 on), else its ``scontrol -d -o show job ID`` text, read only
        when its keys are all Slurm's own (:mod:`slurmtopo.slurm.jobrecord`);
        a record that is not, on a Slurm with ``squeue --json`` (22.05), is
        looked up there instead, and is an unreadable job where Slurm has
        no JSON at all."""
        job_id = int(job_id)
        argv = ["scontrol", "--json", "show", "job", str(job_id)]
        if self._json is not False and tuple(argv[:4]) not in self._unsupported:
            p = self.run(argv, check=False)
            if p.returncode == 0 and p.stdout.lstrip().startswith("{"):
                jobs = jobrecord.jobs_from_json(p.stdout, "scontrol show job --json",
                                                job_ids=[job_id])
                return jobs[0] if jobs else None
            text = (p.stderr + p.stdout).lower()
            if "invalid job id" in text:
                return None
            if not any(s in text for s in _NO_JSON):
                raise SlurmError(parse.error_text(p.stderr, p.stdout, "scontrol"))
            self._unsupported.add(tuple(argv[:4]))
        job = self._job_text(job_id)
        if job is not None and job.unreadable and self._json is not False \
                and ("squeue", "--json") not in self._unsupported:
            # 22.05: no `scontrol --json`, but squeue --json lists every job
            p = self.run(["squeue", "--json"], check=False)
            if p.returncode == 0 and p.stdout.lstrip().startswith("{"):
                found = jobrecord.jobs_from_json(p.stdout, "squeue --json", job_ids=[job_id])
                return found[0] if found else None
        return job

    def _job_text(self, job_id: int) -> Optional[SlurmJob]:
        p = self.run(["scontrol", "-d", "-o", "show", "job", str(int(job_id))], check=False)
        if p.returncode != 0:
            text = (p.stderr + p.stdout).lower()
            if "invalid job id" in text:
                return None
            raise SlurmError(parse.error_text(p.stderr, p.stdout, "scontrol"))
        return jobrecord.job_alone_from_text(p.stdout, int(job_id), one_liner=True)

    def job_ids(self, user_id: Optional[int] = None) -> FrozenSet[int]:
        """``squeue -h -t all -o %A`` (``-u UID`` for one user's): job ids
        only, no text a user wrote (one per array task: its own id)."""
        argv = ["squeue", "-h", "-t", "all", "-o", "%A"]
        if user_id is not None:
            argv += ["-u", str(int(user_id))]
        out = self.run(argv).stdout
        ids = set()
        for line in out.split():
            if not line.isdigit():
                raise SlurmError(f"squeue printed {line[:20]!r} for a job id")
            ids.add(int(line))
        return frozenset(ids)

    def batch_script(self, job_id: int) -> Optional[str]:
        """``scontrol write batch_script JOBID -`` (the script on stdout);
        None when Slurm no longer has it."""
        p = self.run(["scontrol", "write", "batch_script", str(int(job_id)), "-"], check=False)
        if p.returncode != 0 or not p.stdout.startswith("#!"):
            return None
        return p.stdout

    def accounted_work_dir(self, job_id: int) -> Optional[str]:
        """``sacct -j JOBID -X -n -P -o WorkDir``: the job's working directory
        as accounting keeps it (None: no accounting, or no such job)."""
        p = self.run(["sacct", "-j", str(int(job_id)), "-X", "-n", "-P", "-o", "WorkDir"],
                     check=False)
        lines = [line.strip() for line in p.stdout.splitlines() if line.strip()]
        if p.returncode != 0 or len(lines) != 1 or not lines[0].startswith("/"):
            return None
        return lines[0]

    def version(self) -> str:
        """``slurm 22.05.8`` -> ``22.05.8``."""
        out = self.run(["sinfo", "--version"]).stdout.strip()
        return out.split()[-1] if out else ""

    # -- acting ----------------------------------------------------------
    def submit(self, script: str, args: Sequence[str] = (), hold: bool = False) -> int:
        argv = ["sbatch", "--parsable"] + (["--hold"] if hold else []) + [str(a) for a in args]
        p = self.run(argv, stdin=script)
        first = (p.stdout.strip().splitlines() or [""])[-1]
        try:
            return int(first.split(";", 1)[0])
        except ValueError:
            raise SlurmError(f"sbatch printed no job id: {p.stdout.strip()!r} "
                             f"{p.stderr.strip()!r}") from None

    @staticmethod
    def _pairs(fields: Mapping[str, object]) -> List[str]:
        out = []
        for k, v in fields.items():
            v = "" if v is None else str(v)
            if not k.replace("_", "").isalnum():
                raise SlurmError(f"bad Slurm field name {k!r}")
            if "\n" in v or "\r" in v:
                raise SlurmError(f"{k}: a Slurm field value must be one line")
            out.append(f"{k}={v}")
        return out

    def update_job(self, job_id: int, **fields: str) -> None:
        if not fields:
            return
        self.run(["scontrol", "update", f"JobId={int(job_id)}"] + self._pairs(fields))

    def hold(self, job_id: int) -> None:
        self.run(["scontrol", "hold", str(int(job_id))])

    def uhold(self, job_id: int) -> None:
        self.run(["scontrol", "uhold", str(int(job_id))])

    def release(self, job_id: int) -> None:
        self.run(["scontrol", "release", str(int(job_id))])

    def cancel(self, job_id: int) -> None:
        self.run(["scancel", str(int(job_id))])

    def update_node(self, node: str, **fields: str) -> None:
        if not fields:
            return
        if not node or any(c.isspace() for c in node) or "=" in node:
            raise SlurmError(f"bad node name {node!r}")
        self.run(["scontrol", "update", f"NodeName={node}"] + self._pairs(fields))

    # -- administration and the start-time step --------------------------
    def reconfigure(self) -> None:
        self.run(["scontrol", "reconfigure"])

    def node_reason(self, node: str) -> Optional[str]:
        if not node or any(c.isspace() for c in node) or "=" in node:
            raise SlurmError(f"bad node name {node!r}")
        shown = self.run(["scontrol", "show", "node", node]).stdout
        m = re.search(r"(?:^|\s)Reason=(.*?)(?:\s+\[[^\]]*\])?\s*$", shown, re.M)
        return m.group(1).strip() if m and m.group(1).strip() not in ("", "(null)") else None

    def node_addr(self, node: str) -> Optional[str]:
        if not node or any(c.isspace() for c in node) or "=" in node:
            raise SlurmError(f"bad node name {node!r}")
        shown = self.run(["scontrol", "show", "node", node]).stdout
        m = re.search(r"(?:^|\s)NodeAddr=(\S+)", shown)
        return m.group(1) if m and m.group(1) != "(null)" else None

    def job_detail(self, job_id: int) -> str:
        return self.run(["scontrol", "show", "job", "-d", str(int(job_id))]).stdout

    def job_resources(self, job_id: int) -> str:
        return self.run(["scontrol", "show", "resources", str(int(job_id))]).stdout

    def config_text(self) -> str:
        return self.run(["scontrol", "show", "config"]).stdout

    def accounting(self, start: str, end: str, fields: Sequence[str]) -> str:
        for what, value in (("start", start), ("end", end)):
            if not value or value.startswith("-") or any(c.isspace() for c in value):
                raise SlurmError(f"sacct: bad {what} time {value!r}")
        return self.run(["sacct", "-a", "-X", "-P", "-S", start, "-E", end,
                         "-o", ",".join(fields)]).stdout

    def step_output(self, options: Sequence[str], command: Sequence[str],
                    env: Optional[Mapping[str, str]] = None) -> str:
        runner = self if env is None else CliBackend(env=env, timeout=self.timeout,
                                                     json=self._json)
        return runner.run(["srun", *options, *command]).stdout

    def srun_options(self) -> Optional[FrozenSet[str]]:
        """From ``srun --help`` (which lists the options of SPANK plugins
        such as pyxis), asked once per backend and bounded by
        :data:`SRUN_HELP_TIMEOUT`: srun looks its configuration up first
        and can hang on DNS where it has none. None when srun cannot say
        (no srun, no configuration, a help text without its usual options)."""
        if self._srun_options is _UNASKED:
            runner = CliBackend(env=self.env, timeout=min(self.timeout, SRUN_HELP_TIMEOUT))
            try:
                p = runner.run(["srun", "--help"], check=False)
            except SlurmError:
                self._srun_options = None
            else:
                found = parse_srun_help(p.stdout) if p.returncode == 0 else None
                self._srun_options = found
        return self._srun_options  # type: ignore[return-value]

    def topology_text(self) -> str:
        return self.run(["scontrol", "show", "topology"]).stdout

    # -- extras (admin tooling, tests) -------------------------------------
    def topology(self) -> Dict[str, Dict[str, object]]:
        """``scontrol show topology`` as {switch: {level, nodes, switches}}."""
        return parse.parse_scontrol_topology(self.run(["scontrol", "show", "topology"]).stdout)
