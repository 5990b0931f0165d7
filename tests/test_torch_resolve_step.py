"""torch.resolve through the engine: the resolver's choice and explanation in the plan, the resolved section.

Host facts come from what node.inventory/gpu.detect leave in the run state (ctx.state) (the reference host and the
public resolver corpus); arch and glibc are read in the "container" through `pct exec` (test-only
stand-in, tests/support/fake_pct.py).
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import pytest

from provisioner.playbook import Playbook
from tests.support.fake_pct import Node, known_gpus, reference_gpus, run_playbook
from tests.support.shared import corpus

CORPUS = {c["id"]: c for c in corpus("resolver-public.json")}


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    monkeypatch.setenv("PROVISIONER_STATE_DIR", str(tmp_path / "state"))
    return Node(tmp_path / "node")


def resolve_playbook(params: dict[str, Any], resolved: dict[str, Any] | None = None) -> Playbook:
    return Playbook.model_validate({
        "schema_version": 1,
        "target": {"host": "lab-node", "container": 101, "local": True},
        "steps": [{"kind": "torch.resolve", "params": params}],
        "resolved": resolved or {},
    })


def gpus_for(ccs: list[str], driver: str) -> list[dict[str, Any]]:
    return [{**g, "compute_cap": cc} for g, cc in zip(reference_gpus(len(ccs), driver=driver), ccs, strict=True)]


async def test_reference_host_picks_cu128_and_the_plan_explains_it(node: Node) -> None:
    gpus = reference_gpus(8)
    out = await run_playbook(node, resolve_playbook({"torch": "==2.11.0", "python": "3.12"}), mode="plan",
                             state=known_gpus(gpus))
    assert out.result.statuses == ["ok"]
    notes = out.plan("torch.resolve").notes
    assert notes[0] == "torch 2.11.0 + torchvision 0.26.0 from https://download.pytorch.org/whl/cu128 (cu128)"
    assert "because: CC 12.0 ×8: runs the build's sm_120 SASS" in notes
    assert any(n.startswith("because: driver 595.71.05 ≥ 570") for n in notes)
    # The candidate that explains the choice comes first among the rejections: cu126 has no sm_120.
    rejected = [n for n in notes if n.startswith("rejected ")]
    assert rejected[0].startswith("rejected cu126 2.11.0: no kernels for CC 12.0")
    assert any(n.startswith("uv --torch-backend=auto would pick cu130") for n in notes)


async def test_apply_records_the_choice_in_the_resolved_section(node: Node) -> None:
    out = await run_playbook(node, resolve_playbook({"torch": "==2.11.0", "python": "3.12"}),
                             state=known_gpus(reference_gpus(8)))
    torch = out.recorder.playbook().resolved["torch"]
    assert {k: torch[k] for k in ("variant", "index_url", "torch", "torchvision", "cuda", "python")} == {
        "variant": "cu128", "index_url": "https://download.pytorch.org/whl/cu128", "torch": "2.11.0",
        "torchvision": "0.26.0", "cuda": "12.8", "python": "3.12"}
    assert torch["request"] == {"torch": "==2.11.0", "python": "3.12", "prefer": "lowest-cuda", "variant": None}


# The step reads arch and glibc from the container (here: this machine), so only cases for this arch apply.
STEP_CASES = sorted(i for i, c in CORPUS.items() if c["arch"] == platform.machine() and "variants" in c["expect"])


@pytest.mark.parametrize("case_id", STEP_CASES)
async def test_public_corpus_cases_through_the_step(node: Node, case_id: str) -> None:
    case = CORPUS[case_id]
    params = {"torch": case["torch"], "python": case["python"]}
    out = await run_playbook(node, resolve_playbook(params), state=known_gpus(gpus_for(case["cc"],
                                                                                             case["driver"]),
                                                                                    case["driver"]))
    assert out.result.statuses == ["ok"]
    assert out.recorder.playbook().resolved["torch"]["variant"] in case["expect"]["variants"]


async def test_mixed_gpus_without_a_common_build_fail_with_exit_3(node: Node) -> None:
    case = CORPUS.get("E36") or {"cc": ["12.0", "6.1"], "driver": "580.95.05", "python": "3.12", "torch": None}
    out = await run_playbook(node, resolve_playbook({"torch": case["torch"], "python": case["python"]}),
                             state=known_gpus(gpus_for(case["cc"], case["driver"]), case["driver"]))
    assert out.result.statuses == ["failed"]
    assert out.result.exit_code == 3
    message = out.finished("torch.resolve").message
    assert message.startswith("no PyTorch build fits this host (")
    assert "\nfix: " in message


async def test_replay_keeps_the_recorded_choice_while_it_fits(node: Node) -> None:
    params = {"torch": None, "python": "3.12"}
    gpus = reference_gpus(8)
    fresh = await run_playbook(node, resolve_playbook(params), state=known_gpus(gpus))
    newest = fresh.recorder.playbook().resolved["torch"]
    assert newest["torch"] != "2.11.0"

    request = {"torch": None, "python": "3.12", "prefer": "lowest-cuda", "variant": None}
    recorded = {"torch": {"torch": "2.11.0", "variant": "cu128", "request": request}}
    replay = await run_playbook(node, resolve_playbook(params, recorded), state=known_gpus(gpus))
    assert replay.recorder.playbook().resolved["torch"]["torch"] == "2.11.0"
    assert "kept the recorded choice torch 2.11.0 (cu128) from the playbook's resolved section" in \
        replay.plan("torch.resolve").notes

    stale = {"torch": {"torch": "2.11.0", "variant": "cu126", "request": request}}
    again = await run_playbook(node, resolve_playbook(params, stale), state=known_gpus(gpus))
    assert again.recorder.playbook().resolved["torch"]["torch"] == newest["torch"]
    assert any(n.startswith("the recorded choice torch 2.11.0 (cu126) no longer fits: resolver now picks cu128")
               for n in again.plan("torch.resolve").notes)


async def test_variant_override_is_explained(node: Node) -> None:
    out = await run_playbook(node, resolve_playbook({"torch": "==2.11.0", "python": "3.12", "variant": "cu129"}),
                             mode="plan", state=known_gpus(reference_gpus(8)))
    notes = out.plan("torch.resolve").notes
    assert notes[0].endswith("from https://download.pytorch.org/whl/cu129 (cu129)")
    assert "because: variant overridden by the playbook: cu129 (resolver chose cu128)" in notes


async def test_gpu_without_compute_capability_is_a_clear_failure(node: Node) -> None:
    gpus = reference_gpus(2)
    gpus[1]["compute_cap"] = None  # nvidia-smi printed [N/A]
    out = await run_playbook(node, resolve_playbook({"torch": "==2.11.0", "python": "3.12"}),
                             state=known_gpus(gpus))
    assert out.result.statuses == ["failed"]
    assert out.finished("torch.resolve").message.startswith("nvidia-smi reports no compute capability for GPU 1")
