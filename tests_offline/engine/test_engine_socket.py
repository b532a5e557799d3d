"""A socket left in the run folder by an engine that died is removed before the next container is created (vLLM
refuses to bind an existing path), and nothing but a socket is ever removed. No Docker: the client stands in
for the daemon and refuses the create, which is after the removal and where a launch would go on."""
from __future__ import annotations

import os
import socket
import stat

import pytest
from docker.errors import ImageNotFound

from onegpu.core.outcomes import Blocked
from onegpu.engine.container import Engine
from onegpu.engine.launch import Owner, build_launch_spec
from tests_offline.engine_helpers import settings_for

OWNER = Owner(pid=os.getpid(), start_ticks=None, boot_id=None, pidns=None, uid=os.getuid(), gid=os.getgid())


class RefusingDaemon:
    """`containers.create` notes whether the socket path is still there, then says the image is gone."""

    path_at_create: list[bool]

    def __init__(self, socket_path: str):
        self.socket_path, self.path_at_create = socket_path, []
        self.containers = self

    def create(self, **kwargs):
        self.path_at_create.append(os.path.lexists(self.socket_path))
        raise ImageNotFound("no such image")

    def get(self, name):
        raise ImageNotFound(name)


def launch_once(tmp_path) -> tuple[RefusingDaemon, list[dict]]:
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    spec = build_launch_spec(settings_for(tmp_path / "ckpt"), None, "sha256:" + "0" * 64, "r", str(tmp_path / "sock"),
                             OWNER)
    daemon, records = RefusingDaemon(spec.socket_path), []
    with pytest.raises(Blocked) as refused:
        Engine(daemon, spec, tmp_path, 60, record=lambda **kv: records.append(kv)).launch()
    assert refused.value.code == "IMAGE_MISSING"
    return daemon, records


def leave_socket(folder) -> None:
    """What a dead engine leaves: a bound Unix socket whose owner is gone (binding creates the file; closing
    the socket does not remove it)."""
    folder.mkdir(exist_ok=True)
    cwd = os.getcwd()
    os.chdir(folder)  # a relative bind: a pytest tmp path can be longer than a socket path may be (107 bytes)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind("engine.sock")
    finally:
        os.chdir(cwd)


def test_a_stale_socket_is_removed_before_the_container_is_created_and_recorded(tmp_path):
    leave_socket(tmp_path / "sock")
    path = tmp_path / "sock" / "engine.sock"
    assert stat.S_ISSOCK(path.lstat().st_mode)
    daemon, records = launch_once(tmp_path)
    assert daemon.path_at_create == [False] and not os.path.lexists(path)
    assert {"stale_socket_removed": str(path)} in records


@pytest.mark.parametrize("make", ["file", "folder", "link"])
def test_anything_but_a_socket_at_the_path_is_left_alone(tmp_path, make):
    folder = tmp_path / "sock"
    folder.mkdir()
    path = folder / "engine.sock"
    if make == "file":
        path.write_text("an operator's file")
    elif make == "folder":
        path.mkdir()
    else:  # a link to a socket is not the socket: lstat sees the link, and the link stays
        leave_socket(tmp_path / "elsewhere")
        path.symlink_to(tmp_path / "elsewhere" / "engine.sock")
    daemon, records = launch_once(tmp_path)
    assert daemon.path_at_create == [True] and os.path.lexists(path)
    assert make != "file" or path.read_text() == "an operator's file"
    assert not any("stale_socket_removed" in r for r in records)


def test_no_socket_is_no_removal(tmp_path):
    (tmp_path / "sock").mkdir()
    daemon, records = launch_once(tmp_path)
    assert daemon.path_at_create == [False]
    assert not any("stale_socket_removed" in r for r in records)
