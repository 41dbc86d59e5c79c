"""The SSH collector against a real sshd on 127.0.0.1 (Debian's
openssh-server), started by the test on free ports with its own host key,
config, authorized_keys and known_hosts: good nodes, a refused connection,
a slow node, an unknown and a wrong host key, bad credentials."""
from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurmtopo.admin.collect import SshFetcher, collect_ssh

from .conftest import node, run_main, write_reports

pytestmark = pytest.mark.sshd

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
LISTEN = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True,
                   stdout=subprocess.DEVNULL)
    return path.with_suffix(".pub").read_text().split()[0:2]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if not os.path.exists(SSHD) or shutil.which("ssh-keygen") is None:
        pytest.skip("openssh-server is not installed (scripts/install-deps.sh installs it)")
    d = tmp_path_factory.mktemp("sshd")
    host_type, host_key = _keygen(d / "host_key")
    other_type, other_key = _keygen(d / "other_host_key")
    _keygen(d / "user_key")
    (d / "authorized_keys").write_text((d / "user_key.pub").read_text())
    port, closed = _free_port(), _free_port()
    (d / "sshd_config").write_text("\n".join(
        [f"Port {port}"] + [f"ListenAddress {a}" for a in LISTEN] + [
            f"HostKey {d}/host_key", f"PidFile {d}/sshd.pid",
            f"AuthorizedKeysFile {d}/authorized_keys", "StrictModes no", "UsePAM no",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes", "PermitRootLogin prohibit-password",
            "MaxStartups 100:30:200", "LogLevel ERROR", ""]))
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privsep directory
    log = open(d / "sshd.log", "w")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.skip(f"could not start sshd: {(d / 'sshd.log').read_text()[-500:]}")
            time.sleep(0.1)
    # known_hosts: the real key for 127.0.0.1, a wrong one for 127.0.0.3, none for .2
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_type} {host_key}\n"
                                   f"[127.0.0.3]:{port} {other_type} {other_key}\n")
    user = getpass.getuser()
    common = [f"  User {user}", f"  IdentityFile {d}/user_key", "  IdentitiesOnly yes",
              f"  UserKnownHostsFile {d}/known_hosts"]
    (d / "ssh_config").write_text("\n".join(
        ["Host gpu* slow*", "  HostName 127.0.0.1", f"  Port {port}"] + common +
        ["Host down*", "  HostName 127.0.0.1", f"  Port {closed}"] + common +
        ["Host stranger*", "  HostName 127.0.0.2", f"  Port {port}"] + common +
        ["Host liar*", "  HostName 127.0.0.3", f"  Port {port}"] + common + [""]))
    reports = d / "reports"
    write_reports(reports, [node(n) for n in ("gpu001", "gpu002", "gpu003", "gpu004", "slow01",
                                              "down01", "stranger01", "liar01")])
    (d / "agent.sh").write_text(f'#!/bin/sh\ncase "$1" in slow*) sleep 6;; esac\n'
                                f'exec cat "{reports}/$1.yaml"\n')
    yield SimpleNamespace(dir=d, port=port, config=str(d / "ssh_config"),
                          known_hosts=d / "known_hosts", reports=reports,
                          command=f"sh {d}/agent.sh {{node}}")
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def test_collect_over_ssh(sshd, tmp_path):
    dest = tmp_path / "reports"
    # last good reports of two nodes that will fail this time
    write_reports(dest, [node("slow01"), node("down01")])
    known_before = sshd.known_hosts.read_text()
    fetcher = SshFetcher(command=sshd.command, timeout=2.5, ssh_config=sshd.config)
    nodes = ["gpu001", "gpu002", "gpu003", "gpu004", "slow01", "down01", "stranger01", "liar01"]
    seen = []
    results = {r.node: r for r in collect_ssh(nodes, str(dest), fetcher, workers=4,
                                              progress=seen.append)}
    assert len(seen) == len(nodes)
    for n in ("gpu001", "gpu002", "gpu003", "gpu004"):
        assert results[n].ok, results[n].error
        assert (dest / f"{n}.yaml").read_text() == (sshd.reports / f"{n}.yaml").read_text()
    slow, down = results["slow01"], results["down01"]
    assert not slow.ok and slow.error == "timed out after 2.5 s" and slow.stale_kept
    assert not down.ok and down.error.startswith("connection refused") and down.stale_kept
    assert "stale: true" in (dest / "slow01.yaml").read_text()
    stranger = results["stranger01"]
    assert not stranger.ok and not stranger.stale_kept
    assert "is not in known_hosts" in stranger.error and "SHA256:" in stranger.error
    assert "ssh-keyscan" in stranger.error
    assert "HOST KEY MISMATCH" in results["liar01"].error
    assert sshd.known_hosts.read_text() == known_before  # nothing was added, ever
    assert not (dest / "stranger01.yaml").exists() and not (dest / "liar01.yaml").exists()


def test_collect_cli_over_ssh(sshd, tmp_path, capsys):
    dest = tmp_path / "out"
    rc, out, err = run_main(["collect", "--nodes", "gpu[001-004],down01", "-o", str(dest),
                             "--ssh-config", sshd.config, "--command", sshd.command,
                             "--timeout", "5", "--workers", "2"], capsys)
    assert rc == 1
    assert "down01: connection refused (127.0.0.1 port" in err and "(no report kept)" in err
    assert "collected 4/5 report(s)" in err
    assert err.splitlines()[-1] == ("slurmtopo: error: 1 of 5 node(s) failed (0 with a stale "
                                    "report kept)")
    assert sorted(p.name for p in dest.iterdir()) == [f"gpu00{i}.yaml" for i in range(1, 5)]


def test_read_last_report_instead_of_running_the_agent(sshd, tmp_path, capsys):
    dest = tmp_path / "out"
    rc, _, err = run_main(["collect", "--nodes", "gpu[001-002]", "-o", str(dest),
                           "--ssh-config", sshd.config, "--read", f"{sshd.reports}/{{node}}.yaml",
                           "--timeout", "5"], capsys)
    assert rc == 0, err
    rc, _, err = run_main(["collect", "--nodes", "gpu003", "-o", str(dest), "--ssh-config",
                           sshd.config, "--read", "/nonexistent/{node}.yaml"], capsys)
    assert rc == 1 and "command exited with status 1: cat: /nonexistent/gpu003.yaml" in err


def test_bad_credentials_and_explicit_options(sshd, tmp_path, capsys):
    fetcher = SshFetcher(command="true", timeout=5, ssh_config=sshd.config,
                         user="no-such-user-here")
    results = collect_ssh(["gpu001"], str(tmp_path), fetcher)
    assert results[0].error == "authentication failed for no-such-user-here@127.0.0.1"
    # everything from the command line, no SSH config at all
    empty = tmp_path / "empty_config"
    empty.write_text("")
    fetcher = SshFetcher(command=sshd.command.replace("{node}", "gpu004"), timeout=5,
                         ssh_config=str(empty), known_hosts=[str(sshd.known_hosts)],
                         identity=str(sshd.dir / "user_key"), port=sshd.port,
                         user=getpass.getuser())
    results = collect_ssh(["127.0.0.1"], str(tmp_path), fetcher)
    assert not results[0].ok and "report is for node 'gpu004', not '127.0.0.1'" in \
        results[0].error
