"""The two-user setup itself (tests/integration/users.py): each user's jobs
run as that user, the shared directory is the group's, and the users' copy
of slurmtopo is what they import. The security tests build on this."""
from __future__ import annotations

import os
import stat

from tests.integration.users import ALICE, BOB, GROUP


def test_each_user_runs_jobs_as_themselves(devcluster, users):
    out = users.shared / "who.out"
    p = users.run(ALICE, ["sbatch", "--parsable", "-p", devcluster.partition, "-o", str(out),
                          "--wrap", "id -un; id -Gn"], check=True)
    job = int(p.stdout.strip().split(";")[0])
    assert devcluster.wait_job(job) == "COMPLETED"
    lines = out.read_text().split("\n")
    assert lines[0] == ALICE
    assert GROUP in lines[1].split()
    assert os.stat(out).st_uid == users.uid(ALICE)


def test_shared_directory_is_the_groups_and_users_import_their_copy(users):
    st = os.stat(users.shared)
    assert stat.S_IMODE(st.st_mode) == 0o2770
    assert users.group.gr_gid == st.st_gid
    p = users.run(BOB, ["/usr/bin/python3", "-c",
                        "import slurmtopo, os; print(slurmtopo.__file__); print(os.getuid())"],
                  check=True)
    path, uid = p.stdout.split()
    assert path.startswith(str(users.site))
    assert int(uid) == users.uid(BOB)
    p = users.slurmtopo(BOB, "groups", "--world", "8", "--tp", "2", "--json", check=True)
    assert '"tp"' in p.stdout
