"""The pytest-timeout backstop of an approved session: above every deadline of the settings, on acting tests."""
from __future__ import annotations

import json

from devkit.synth import write_checkpoint
from onegpu.plan.settings import load_settings
from onegpu.session.backstop import HASHING_FLOOR_BYTES_PER_S, SLACK_S, backstop_s, checkpoint_bytes

SETTINGS = {"schema": "onegpu/settings@1", "model_id": "org/tiny", "model_revision": "a" * 40, "image": "img:v1",
            "gpu": 0, "context_tokens": 4096, "prefill_chunk_tokens": 512, "cpu_offload_gib": 0,
            "container_ram_gib": 8, "host_headroom_gib": 1, "deadline_s": 1000, "boot_deadline_s": 300,
            "serve_window_s": 200}


def settings_file(tmp_path, root):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({**SETTINGS, "model_path": str(root)}))
    return path


def approvable_project(kit_project, tmp_path, test_source: str) -> None:
    """A tiny checkpoint, settings naming it, and one kit test file in the pytester project."""
    root = tmp_path / "ckpt"
    write_checkpoint(root, {"architectures": ["X"]}, {"w": ("BF16", [4, 4])}, shards=1)
    settings_file(kit_project.path, root)
    kit_project.makepyfile(**{"tests_hw/test_1_limits": "import pytest\n" + test_source})


def test_the_backstop_sums_every_deadline_and_slow_hashing(tmp_path):
    root = tmp_path / "ckpt"
    big = ("BF16", [1024, 1024 * 1024])
    write_checkpoint(root, {"architectures": ["X"]}, {"w": big, "v": big}, shards=2)
    size = checkpoint_bytes(root)
    assert size > 2 * 2**30  # the sparse shards count by their apparent size
    settings = load_settings(settings_file(tmp_path, root))
    assert backstop_s(settings, size) == 300 + 1000 + 200 + size // HASHING_FLOOR_BYTES_PER_S + SLACK_S


def test_an_approved_session_marks_only_its_acting_tests(kit_project, tmp_path):
    approvable_project(kit_project, tmp_path, (
        "@pytest.mark.scan\n@pytest.mark.phase('machine')\ndef test_reads(request):\n"
        "    assert request.node.get_closest_marker('timeout') is None\n"
        "@pytest.mark.approve_load\n@pytest.mark.phase('load')\ndef test_acts(request):\n"
        "    mark = request.node.get_closest_marker('timeout')\n"
        "    assert mark.args[0] > 1500 and mark.kwargs == {'method': 'signal'}\n"))
    result = kit_project.runpytest("-m", "approve_load", "--settings=s.json")
    result.assert_outcomes(passed=2)
    (folder,) = (kit_project.path / "runs").iterdir()
    assert json.loads((folder / "receipt.json").read_text())["timeout_backstop_s"] > 1500


def test_an_explicit_timeout_is_the_operators_choice(kit_project, tmp_path):
    approvable_project(kit_project, tmp_path, (
        "@pytest.mark.approve_load\n@pytest.mark.phase('load')\ndef test_acts(request):\n"
        "    assert request.node.get_closest_marker('timeout') is None\n"))
    kit_project.runpytest("-m", "approve_load", "--settings=s.json", "--timeout=30").assert_outcomes(passed=1)
