"""Session fixture of the launch plan (tests_hw/test_2_plan_launch.py): the exact engine launch a person approves
(KIT.md 3.3). Overridable in a conftest (e.g. `launch_spec` rebuilt without a GPU device request for tests)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from msgspec import structs

from onegpu.checkpoint.scan import read_config
from onegpu.checkpoint.towers import has_towers
from onegpu.engine.launch import LaunchSpec, build_launch_spec
from onegpu.engine.leftovers import current_owner
from onegpu.evidence.rundir import FOLDER_MODE
from onegpu.phases.plan import image_or_none
from onegpu.session.glue import blocked_as_xfail

SOCKET_FOLDER = "sock"


def socket_folder(run_folder: Path) -> Path:
    """<run folder>/sock, 0700: the only host folder the engine may write to."""
    folder = run_folder / SOCKET_FOLDER
    folder.mkdir(mode=FOLDER_MODE, exist_ok=True)
    os.chmod(folder, FOLDER_MODE)
    return folder


def _image_for_plan(request, hardware, settings) -> tuple[str, list[str]]:
    """The image ID for the plan; a replayed scan plans for another machine, so it names the reference and
    says the approval resolves it on the target."""
    image = image_or_none(request, hardware)
    if image is not None:
        return image.id, []
    return settings.image, [f"REPLAYED: image {settings.image!r} is not resolved on this machine; the approval on "
                            "the target resolves it to its sha256 ID and creates the container from that ID"]


@pytest.fixture(scope="session")
def launch_spec(request, settings, selected_gpu, gpu_set, hardware, kit) -> LaunchSpec:
    """The exact engine launch (argv, mounts, caps) a person approves; shown and kept in the receipt."""
    image_id, notes = _image_for_plan(request, hardware, settings)
    root = os.path.realpath(settings.model_path)
    with blocked_as_xfail():  # the launch depends on config.json: its towers decide --language-model-only
        towers = has_towers(read_config(root))
    spec = build_launch_spec(settings, selected_gpu.uuid, image_id, kit.run_folder.name,
                             str(socket_folder(kit.run_folder)), current_owner(), checkpoint_root=root,
                             towers=towers, gpu_uuids=[d.uuid for d in gpu_set])
    if notes:
        spec = structs.replace(spec, notes=[*spec.notes, *notes])
    kit.table("onegpu launch plan", spec.plan_lines())
    kit.receipt.set("launch", spec.to_json())
    return spec
