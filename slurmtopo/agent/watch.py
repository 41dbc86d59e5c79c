"""``slurmtopo agent run``: rediscover, rewrite the report on change, drain
on degradation.

Every cycle:

1. discover the node (NVML + sysfs);
2. compare with the *baseline*, the last good discovery, kept beside the
   report as ``.<node>.good.yaml`` (dot files are not read as inventory);
3. write ``<node>.yaml`` atomically, only when it changed (the planner and
   file watchers are not woken up every five minutes for nothing); a
   degraded report lists what degraded in ``report.degraded``;
4. with ``--drain``: on degradation ask Slurm to drain the node with a
   ``slurmtopo: ...`` reason and leave a ``.<node>.drained`` marker; when
   healthy again, resume the node only if that marker says we drained it
   and Slurm's reason is still ours (an admin's own drain is left alone).

A cycle that finds no degradation and a usable node becomes the new
baseline, so hardware that was added or fixed is accepted.
"""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

from slurmtopo.agent import health
from slurmtopo.slurmfmt.gres_lines import gres_text
from slurmtopo.agent.report import Discovery, comparable
from slurmtopo.errors import SlurmError, SlurmtopoError
from slurmtopo.files.fileio import atomic_write, read_text
from slurmtopo.inventory.schema import load_inventory
from slurmtopo.slurm.cli_backend import CliBackend

log = logging.getLogger("slurmtopo.agent")

REASON_TAG = "slurmtopo:"


@dataclass
class CycleResult:
    changed: bool
    degraded: List[health.Degradation] = field(default_factory=list)
    drained: bool = False
    resumed: bool = False
    usable: bool = True


class Agent:
    """One node's watcher; ``discover`` returns a fresh Discovery."""

    def __init__(self, discover: Callable[[], Discovery], report_dir: str,
                 state_dir: Optional[str] = None, drain: bool = False,
                 gres_conf: Optional[str] = None, slurm=None, slurm_version=None):
        self.discover = discover
        self.report_dir = report_dir
        self.state_dir = state_dir or report_dir
        self.drain = drain
        self.gres_conf = gres_conf
        self.slurm_version = slurm_version  # the gres.conf format of that release
        #: the Slurm backend (drain, resume, read a node's reason); the
        #: command-line one unless given
        self._slurm = slurm
        self._base_cache: Optional[tuple] = None  # (text, node) of the baseline file

    # -- files ---------------------------------------------------------------

    def report_path(self, name: str) -> str:
        return os.path.join(self.report_dir, f"{name}.yaml")

    def baseline_path(self, name: str) -> str:
        return os.path.join(self.state_dir, f".{name}.good.yaml")

    def marker_path(self, name: str) -> str:
        return os.path.join(self.state_dir, f".{name}.drained")

    @staticmethod
    def _read(path: str) -> Optional[str]:
        """The file's text, or None when it is missing or unreadable (a
        FIFO or device in its place included: refused, never waited on)."""
        try:
            return read_text(path)
        except SlurmtopoError:
            return None

    def forget_baseline(self, name: str) -> None:
        """Accept the next healthy discovery as good (hardware changed on
        purpose). A drain marker stays: the next healthy cycle resumes."""
        try:
            os.unlink(self.baseline_path(name))
        except FileNotFoundError:
            pass
        self._base_cache = None

    def _baseline(self, name: str):
        """The last good Node (parsed once per content of the file)."""
        path = self.baseline_path(name)
        text = self._read(path)
        if text is None:
            return None
        if self._base_cache and self._base_cache[0] == text:
            return self._base_cache[1]
        try:
            node = load_inventory(path).nodes.get(name)
        except SlurmtopoError as exc:
            log.error("ignoring unreadable baseline %s: %s", path, exc)
            return None
        self._base_cache = (text, node)
        return node

    # -- one cycle -----------------------------------------------------------

    def cycle(self) -> CycleResult:
        d = self.discover()
        name = d.node.name
        for p in d.problems:
            log.warning("%s: %s", name, p)
        good = self._baseline(name)
        found = health.degradations(good, d.node, d.report) if good is not None else []
        if not d.usable and good is None:
            log.error("%s: no usable GPU and no earlier good report to compare with", name)
        if found:
            d.report["degraded"] = [str(x) for x in found]
            for x in found:
                log.error("%s: degraded: %s", name, x)
        text = d.render()
        old = self._read(self.report_path(name))
        changed = old is None or comparable(old) != comparable(text)
        if changed:
            atomic_write(self.report_path(name), text)
            log.info("%s: report written to %s", name, self.report_path(name))
        if not found and d.usable:
            base_old = self._read(self.baseline_path(name))
            if base_old is None or comparable(base_old) != comparable(text):
                atomic_write(self.baseline_path(name), text)
        if self.gres_conf:
            gtext = gres_text(d.node, d.report, slurm_version=self.slurm_version)
            if self._read(self.gres_conf) != gtext:
                atomic_write(self.gres_conf, gtext)
        res = CycleResult(changed=changed, degraded=found, usable=d.usable)
        if self.drain:
            if found:
                res.drained = self._drain(name, health.summary(found))
            else:
                res.resumed = self._resume(name)
        return res

    # -- Slurm ---------------------------------------------------------------

    @property
    def slurm(self):
        if self._slurm is None:
            self._slurm = CliBackend()
        return self._slurm

    def _ask_slurm(self, what: str, call: Callable[[], object]) -> Tuple[bool, object]:
        """(ok, answer); a refusal is logged and retried next cycle."""
        try:
            return True, call()
        except SlurmError as exc:
            log.error("%s failed: %s", what, exc.render())
            return False, None

    def _drain(self, name: str, why: str) -> bool:
        reason = f"{REASON_TAG} {why}"
        marker = self.marker_path(name)
        if self._read(marker) == reason + "\n":
            return False  # already drained for exactly this
        ok, _ = self._ask_slurm(f"drain {name}", lambda: self.slurm.update_node(
            name, State="DRAIN", Reason=reason))
        if not ok:
            return False
        atomic_write(marker, reason + "\n")
        log.warning("%s: drained: %s", name, reason)
        return True

    def _resume(self, name: str) -> bool:
        marker = self.marker_path(name)
        if not os.path.exists(marker):
            return False  # we did not drain it: not ours to resume
        ok, current = self._ask_slurm(f"reading {name}'s reason",
                                      lambda: self.slurm.node_reason(name))
        if not ok:
            return False  # try again next cycle
        if not (current and current.startswith(REASON_TAG)):
            log.warning("%s: healthy again, but its drain reason is no longer ours (%s); "
                        "leaving it to the admin", name, current or "none")
            os.unlink(marker)
            return False
        ok, _ = self._ask_slurm(f"resume {name}", lambda: self.slurm.update_node(
            name, State="RESUME"))
        if not ok:
            return False
        os.unlink(marker)
        log.warning("%s: healthy again, resumed", name)
        return True

    # -- loop ----------------------------------------------------------------

    def run(self, interval: float, iterations: Optional[int] = None,
            stop: Optional[threading.Event] = None) -> None:
        stop = stop or threading.Event()
        done = 0
        while not stop.is_set():
            try:
                self.cycle()
            except SlurmtopoError as exc:
                log.error("cycle failed: %s", exc.render())
            except Exception:  # noqa: BLE001 - a long-running watch logs and goes on
                log.exception("cycle failed")
            done += 1
            if iterations is not None and done >= iterations:
                break
            stop.wait(interval)
