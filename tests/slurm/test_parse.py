"""The parsers on output recorded from the dev cluster's Slurm 22.05
(tests/fixtures/slurm/README.md says how each file was made)."""
from __future__ import annotations

import json

import pytest

from slurmtopo.errors import SlurmError
from slurmtopo.slurm import jobrecord, parse
from slurmtopo.slurm.backend import cluster_state_from
from slurmtopo.slurmfmt import gres_strings



def text_jobs(text, one_liner=False):
    """``scontrol show job`` text as the command-line backend reads it."""
    jobs, ask = jobrecord.jobs_from_text(text, one_liner)
    assert not ask, ask
    return jobs


def parse_sinfo_json(text_or_data):
    """sinfo --json as the command-line backend reads it."""
    return parse.parse_nodes_json(text_or_data, "sinfo --json")


# -- GRES strings --------------------------------------------------------

@pytest.mark.parametrize("text, count, idx", [
    ("gpu:(null):3(IDX:0-2)", 3, {0, 1, 2}),                    # 22.05, untyped node
    ("gpu:nvidia_rtx_a6000:3(IDX:0-1,4)", 3, {0, 1, 4}),
    ("gpu:(null):0(IDX:N/A)", 0, set()),                         # nothing in use
    ("gpu:a:2(IDX:0-1),gpu:b:1(IDX:5)", 3, {0, 1, 5}),           # two GPU types
    ("gpu:2(IDX:4-5)", 2, {4, 5}),                               # scontrol -d GRES=
    ("gpu:a100:8(S:0-1)", 8, None),                              # configured: no IDX
    ("", 0, set()),
    ("(null)", 0, set()),
])
def test_gpu_indices(text, count, idx):
    got_count, got_idx = gres_strings.gpu_indices(text)
    assert got_count == count
    assert got_idx == (frozenset(idx) if idx is not None else None)


@pytest.mark.parametrize("text, n", [("gpu:8(S:0-1)", 8), ("gpu:nvidia_rtx_a6000:8(S:0-1)", 8),
                                     ("gpu:a:4(S:0),gpu:b:4(S:1),mps:400", 8), ("(null)", 0),
                                     ("gres:gpu:2", 2), ("gres/gpu:h100=4", 4)])
def test_gpu_count(text, n):
    assert gres_strings.gpu_count(text) == n


def test_gpu_types():
    def types(text):
        return [t for _name, t, _count, _extra in gres_strings.parse_gres(text)]
    assert types("gpu:a:4(S:0),gpu:b:4(S:1)") == ["a", "b"]
    assert types("gpu:8(S:0-1)") == [None]


def test_one_gres_grammar_for_slurm_conf_and_slurm_output():
    # slurm.conf's Gres= and sinfo's gres are read by the same parser: a
    # count with a multiplier is a count, an odd item a type, never a traceback
    assert gres_strings.gres_by_type("gpu:h100:4(S:0,1),gpu:a100:2") == {"h100": 4, "a100": 2}
    assert gres_strings.gres_by_type("GPU:2,mps:1K") == {None: 2}
    assert gres_strings.gres_by_type("mps:1K", "mps") == {None: 1024}
    assert gres_strings.gres_by_type("gpu:a:b:x") == {"a:b:x": 1}
    assert gres_strings.gpu_count("gpu:h100:4(S:0,1),gpu:a100:2") == 6


def test_a_jobs_gpu_index_lists_as_written():
    # scontrol -d show job's GRES= (several types) and the older GRES_IDX=:
    # each GPU entry's IDX list as written, other GRES left out; the
    # start-time step decides what N/A means (tests/test_binding.py)
    assert gres_strings.gpu_index_lists("gpu:a:1(IDX:2),mps:100,gpu:b:1(IDX:5-6)") == \
        ["2", "5-6"]
    assert gres_strings.gpu_index_lists("gpu(idx:0-1)") == ["0-1"]
    assert gres_strings.gpu_index_lists("gpu:2(IDX:N/A)") == ["N/A"]
    assert gres_strings.gpu_index_lists("gpu:h100:8") == []


# -- sinfo --json ----------------------------------------------------------

def test_sinfo_untyped_with_an_exclusive_job(fixture_text):
    nodes = {n.name: n for n in parse_sinfo_json(fixture_text("sinfo_untyped_busy.json"))}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node1"].state == "mixed" and nodes["node1"].gpus_total == 8
    assert nodes["node1"].gpus_used == {0, 1, 2}
    assert nodes["node2"].gpus_used == {0, 1}
    # an --exclusive job without a GRES request still holds every GPU
    assert nodes["node4"].state == "allocated" and nodes["node4"].gpus_used == set(range(8))
    assert nodes["node1"].partitions == ("gpu",) and nodes["node1"].reason is None
    assert nodes["node1"].cpus_total == 16 and nodes["node1"].cpus_alloc == 1


def test_sinfo_drain_flag_reason_and_features(fixture_text):
    nodes = {n.name: n for n in parse_sinfo_json(fixture_text("sinfo_untyped_drain.json"))}
    assert nodes["node3"].state == "mixed" and nodes["node3"].flags == {"drain"}
    assert nodes["node3"].reason == "bad gpu 3; see ticket #12"
    assert not nodes["node3"].usable and nodes["node1"].usable
    assert nodes["node2"].features == ("a6000", "leaf1")


def test_sinfo_typed_down_and_fail(fixture_text):
    typed = {n.name: n for n in parse_sinfo_json(fixture_text("sinfo_typed.json"))}
    assert typed["node1"].gres == "gpu:nvidia_rtx_a6000:8(S:0-1)"
    assert typed["node1"].gpus_used == {0, 1, 4}           # Slurm picked GPU 4 for one job
    assert typed["node4"].gpus_used == {0, 1, 2, 4, 5}
    fail = {n.name: n for n in parse_sinfo_json(fixture_text("sinfo_typed_fail.json"))}
    assert fail["node2"].flags == {"fail"} and not fail["node2"].usable
    assert fail["node3"].state == "down" and not fail["node3"].usable
    assert fail["node3"].reason == "slurmtopo agent: GPU 3 lost"


def test_sinfo_later_json_shapes():
    """23.02+ prints state as a list and numbers as {set, number}."""
    doc = {"nodes": [{"name": "gpu01", "state": ["MIXED", "DRAIN"], "gres": "gpu:h100:8(S:0-1)",
                      "gres_used": "gpu:h100:2(IDX:6-7)", "features": ["h100", "ib"],
                      "active_features": ["h100", "ib"], "partitions": ["batch"],
                      "reason": "", "cpus": 224, "alloc_cpus": {"set": True, "number": 16}}],
           "errors": []}
    (n,) = parse_sinfo_json(json.dumps(doc))
    assert (n.state, n.flags, n.gpus_used, n.features) == ("mixed", {"drain"}, {6, 7},
                                                          ("h100", "ib"))
    assert n.cpus_alloc == 16


def test_sinfo_errors_become_slurm_errors():
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        parse_sinfo_json('{"errors": [{"error": "Unable to contact slurm controller"}]}')
    with pytest.raises(SlurmError, match="not JSON"):
        parse_sinfo_json("sinfo: error: something")


def test_node_state_strings():
    assert parse.split_node_state("MIXED+DRAIN") == ("mixed", frozenset({"drain"}))
    assert parse.split_node_state("idle*") == ("idle", frozenset({"not_responding"}))
    assert parse.split_node_state("IDLE+POWERED_DOWN") == ("idle", frozenset({"powered_down"}))
    assert parse.split_node_state("mix") == ("mixed", frozenset())
    assert parse.split_node_state("down", ["NOT_RESPONDING"]) == \
        ("down", frozenset({"not_responding"}))


# -- squeue --json ---------------------------------------------------------

def test_squeue_gpus_per_node_held_and_exclusive(fixture_text):
    jobs = {j.job_id: j for j in jobrecord.jobs_from_json(fixture_text("squeue_typed.json"))}
    assert jobs[1].name == "we$(ird) `name`" and jobs[1].comment == 'slurmtopo: {"plan": 1}'
    assert jobs[1].gpus == {"node1": (0, 1)} and jobs[1].state == "RUNNING"
    assert jobs[2].gpus == {"node3": (0, 1, 2), "node4": (0, 1, 2)}
    assert jobs[3].gpus == {"node1": (4,)}
    # per-node detail differs between nodes of one job
    assert jobs[6].nodes == ("node2", "node4")
    assert jobs[6].gpus == {"node2": (0, 1), "node4": (4, 5)}
    held = jobs[4]
    assert held.held and held.state == "PENDING" and held.reason == "JobHeldUser"
    assert held.priority == 0 and held.nodes == () and held.gpus == {}
    assert held.req_nodes == ("node1",) and held.num_nodes == 1
    assert not jobs[5].held and jobs[5].reason == "Priority"
    assert jobs[1].submit_time == 1795354520 and jobs[1].user == "root"
    assert jobs[1].gres_request == "gres:gpu:nvidia_rtx_a6000:2"
    untyped = {j.job_id: j for j in jobrecord.jobs_from_json(fixture_text("squeue_untyped.json"))}
    assert untyped[4].exclusive and untyped[4].gpus == {"node4": tuple(range(8))}
    assert not untyped[1].exclusive


def test_squeue_filters_client_side(fixture_text):
    """22.05's squeue --json ignores -j/-t, so the filter is ours."""
    text = fixture_text("squeue_untyped_held.json")
    assert {j.job_id for j in jobrecord.jobs_from_json(text)} == {1, 2, 3, 4, 5, 6, 7}
    assert {j.job_id for j in jobrecord.jobs_from_json(text, states=["pending"])} == {3, 6}
    assert [j.job_id for j in jobrecord.jobs_from_json(text, job_ids=[3])] == [3]
    jobs = {j.job_id: j for j in jobrecord.jobs_from_json(text)}
    assert jobs[1].held and jobs[1].state == "RUNNING"      # admin hold on a running job
    assert not jobs[1].held_by_user and jobs[3].held_by_user  # sbatch --hold: a user hold
    assert jobs[3].comment == "slurmtopo:daemon v=1"
    assert jobs[3].user_id == 0 and jobs[1].fingerprint() == {
        "partition": "gpu", "reservation": "", "qos": "", "account": "", "req_nodes": "node1",
        "exc_nodes": "", "features": ""}
    assert jobs[5].state == "FAILED" and jobs[5].reason == "BadConstraints"


def test_squeue_requeued_job_has_no_nodes(fixture_text):
    jobs = {j.job_id: j for j in jobrecord.jobs_from_json(fixture_text("squeue_typed_requeued.json"))}
    assert jobs[2].state == "PENDING" and jobs[2].nodes == () and jobs[2].gpus == {}
    assert jobs[4].req_nodes == ("node1", "node3")
    assert jobs[4].comment == "slurmtopo-daemon plan=abc"


# -- scontrol text ---------------------------------------------------------

@pytest.mark.parametrize("name", ["scontrol_show_job_d_typed.txt",
                                  "scontrol_show_job_d_oneliner_typed.txt"])
def test_scontrol_jobs_agree_with_squeue(fixture_text, name):
    from_text = {j.job_id: j for j in text_jobs(fixture_text(name), "oneliner" in name)}
    from_json = {j.job_id: j for j in jobrecord.jobs_from_json(fixture_text("squeue_typed.json"))}
    assert sorted(from_text) == sorted(from_json)
    for jid, j in from_json.items():
        t = from_text[jid]
        assert (t.name, t.state, t.nodes, dict(t.gpus), t.comment, t.held, t.req_nodes,
                t.priority, t.submit_time, t.user, t.partition, t.user_id, t.fingerprint(),
                t.held_by_user) == \
               (j.name, j.state, j.nodes, dict(j.gpus), j.comment, j.held, j.req_nodes,
                j.priority, j.submit_time, j.user, j.partition, j.user_id, j.fingerprint(),
                j.held_by_user), jid


def test_scontrol_job_untyped_multi_node(fixture_text):
    jobs = {j.job_id: j for j in text_jobs(fixture_text(
        "scontrol_show_job_d_untyped.txt"))}
    assert jobs[9].gpus == {"node3": (0, 1, 2), "node4": (0, 1, 2)}
    assert jobs[10].gpus == {"node1": (0,)}
    assert jobs[8].name == "we$(ird) `name`" and jobs[8].state == "FAILED"
    # a finished job holds nothing (scontrol keeps an empty GRES= detail line)
    assert jobs[2].state == "CANCELLED" and jobs[2].nodes == ("node2", "node3")
    assert jobs[2].gpus == {} and jobs[4].gpus == {}


def test_scontrol_values_with_blanks_and_equals(fixture_text):
    """Blanks and ``=`` in a user's values, where no blank is followed by a
    key: the record reads as Slurm's."""
    text = fixture_text("scontrol_show_job_d_oneliner_typed.txt").splitlines()[3] + "\n"
    assert text.startswith("JobId=4 JobName=wrap ")
    assert "Comment=" not in text
    text = text.replace("JobName=wrap ", "JobName=a b=c `d` x=y ").replace(
        " StdErr=", ' Comment=slurmtopo:v1:{"layout":{"tp":8}} x=y Z StdErr=', 1)
    (j,) = text_jobs(text, one_liner=True)
    assert j.name == "a b=c `d` x=y" and j.user == "root" and not j.unreadable
    assert j.comment.startswith('slurmtopo:v1:{"layout":{"tp":8}} x=y Z')
    assert j.held and j.req_nodes == ("node1",) and j.nodes == ()


def test_scontrol_nodes(fixture_text):
    nodes = {n.name: n for n in parse.parse_scontrol_nodes(fixture_text(
        "scontrol_d_show_node_typed.txt"))}
    from_json = {n.name: n for n in parse_sinfo_json(fixture_text("sinfo_typed_fail.json"))}
    for name, n in from_json.items():
        t = nodes[name]
        assert (t.state, t.flags, t.gpus_total, t.gpus_used, t.reason) == \
               (n.state, n.flags, n.gpus_total, n.gpus_used, n.reason), name
    # without -d there is no GresUsed: nothing known busy
    plain = parse.parse_scontrol_nodes(fixture_text("scontrol_show_node_typed.txt"))
    assert all(n.gpus_used == frozenset() for n in plain)
    assert {n.gres for n in plain} == {"gpu:nvidia_rtx_a6000:8(S:0-1)"}


def test_scontrol_topology(fixture_text):
    topo = parse.parse_scontrol_topology(fixture_text("scontrol_show_topology.txt"))
    assert topo["leaf1"] == {"level": 0, "nodes": ("node1", "node2"), "switches": (),
                             "link_speed": 200}
    assert topo["spine"]["switches"] == ("leaf1", "leaf2") and topo["spine"]["level"] == 1


def test_error_text_is_slurms_message_on_one_line():
    err = ("sbatch: error: invalid partition specified: nosuch\n"
           "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    assert parse.error_text(err) == ("invalid partition specified: nosuch; Batch job "
                                     "submission failed: Invalid partition name specified")
    assert parse.error_text("Invalid job id specified for job 99\n"
                            "slurm_suspend error: Invalid job id specified\n") == \
        "Invalid job id specified for job 99; slurm_suspend error: Invalid job id specified"
    assert parse.error_text("", "", "scancel") == "scancel failed without a message"


def test_error_text_says_when_no_slurm_configuration_is_found():
    """sinfo on a machine with no Slurm configuration (no SLURM_CONF, no
    /etc/slurm, no DNS SRV record): Slurm's words alone name no file and
    no fix (issue 24: a user trying `plan --state live` off the cluster)."""
    err = ("sinfo: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
           "sinfo: error: fetch_config: DNS SRV lookup failed\n"
           "sinfo: error: _establish_config_source: failed to fetch config\n"
           "sinfo: fatal: Could not establish a configuration source\n")
    text = parse.error_text(err, "", "sinfo")
    assert text.startswith("sinfo: no Slurm configuration found (set SLURM_CONF, or run on a "
                           "node of the cluster; --state none or a snapshot file plans without "
                           "Slurm): ")
    assert text.endswith("Could not establish a configuration source")
    assert "\n" not in text


# -- cluster state ---------------------------------------------------------

def test_cluster_state_from_sinfo(fixture_text):
    from slurmtopo.inventory.schema import load_inventory
    from tests.slurm.conftest import FIXTURES

    inv = load_inventory(str(FIXTURES / "devcluster-inventory.yaml"))
    nodes = parse_sinfo_json(fixture_text("sinfo_untyped_drain.json"))
    st = cluster_state_from(nodes, inv)
    free = {n: st.free_gpus(inv.nodes[n]) for n in inv.nodes}
    assert free == {"node1": (3, 4, 5, 6, 7), "node2": (2, 3, 4, 5, 6, 7),
                    "node3": (),   # draining
                    "node4": ()}   # allocated (exclusive job)
    assert st.nodes["node4"].exclusive


def test_cluster_state_nodes_slurm_lacks_or_has_fewer_gpus(fixture_text):
    from slurmtopo.inventory.schema import load_inventory
    from slurmtopo.slurm.backend import SlurmNode
    from tests.slurm.conftest import FIXTURES

    inv = load_inventory(str(FIXTURES / "devcluster-inventory.yaml"))
    nodes = [SlurmNode("node1", "idle", gpus_total=6), SlurmNode("node2", "idle", gpus_total=8),
             SlurmNode("other9", "idle", gpus_total=8)]
    st = cluster_state_from(nodes, inv)
    assert "other9" not in st.nodes                                 # not in the inventory
    assert st.free_gpus(inv.nodes["node1"]) == (0, 1, 2, 3, 4, 5)   # Slurm has 6 of 8
    assert st.free_gpus(inv.nodes["node3"]) == ()                   # Slurm lacks it
    assert st.nodes["node3"].state == "down"


# ---- Slurm 25.11 and 26.05 (recorded on the dev cluster built from the release tarballs) ----
# node1: job 1 (GPUs 0-2) and job 2 (GPUs 4-5; its other node is node2, GPUs 0-1);
# job 3 held; node4 drained "fan failed" (tests/fixtures/slurm/README.md)
NEWER = pytest.mark.parametrize("v", ["v25.11", "v26.05"])


@NEWER
def test_newer_scontrol_nodes_json(fixture_text, v):
    nodes = {n.name: n for n in parse.parse_nodes_json(fixture_text(f"{v}/scontrol_show_nodes.json"))}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node1"].gpus_used == {0, 1, 2, 4, 5} and nodes["node1"].state == "mixed"
    assert nodes["node2"].gpus_used == {0, 1}
    assert nodes["node4"].state == "idle" and nodes["node4"].flags == {"drain"}
    assert nodes["node4"].reason == "fan failed" and not nodes["node4"].usable
    assert all(n.gpus_total == 8 and n.partitions == ("gpu",) for n in nodes.values())


@NEWER
def test_newer_sinfo_json_groups_nodes_and_is_still_read(fixture_text, v):
    """24.05+ sinfo --json: top-level "sinfo", nodes grouped by state."""
    data = json.loads(fixture_text(f"{v}/sinfo.json"))
    assert "nodes" not in data and data["sinfo"]
    nodes = {n.name: n for n in parse_sinfo_json(data)}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert nodes["node4"].flags == {"drain"} and nodes["node4"].reason == "fan failed"
    assert nodes["node1"].gpus_used == {0, 1, 2, 4, 5}


@NEWER
def test_newer_squeue_json(fixture_text, v):
    jobs = {j.job_id: j for j in jobrecord.jobs_from_json(fixture_text(f"{v}/squeue.json"))}
    assert jobs[1].gpus == {"node1": (0, 1, 2)} and jobs[1].state == "RUNNING"
    assert jobs[2].nodes == ("node1", "node2")
    assert jobs[2].gpus == {"node1": (4, 5), "node2": (0, 1)}
    assert jobs[3].held and jobs[3].reason == "JobHeldUser" and jobs[3].priority == 0
    assert jobs[3].held_by_user and jobs[3].user_id == 0
    assert jobs[3].fingerprint()["partition"] == "gpu" and jobs[3].reservation == ""
    assert jobs[3].comment == "slurmtopo:v1:x"
    assert gres_strings.gpu_count(jobs[2].gres_request) == 2


@NEWER
def test_newer_scontrol_job_text(fixture_text, v):
    (job,) = text_jobs(fixture_text(f"{v}/scontrol_show_job_d_2.txt"))
    assert job.gpus == {"node1": (4, 5), "node2": (0, 1)}
