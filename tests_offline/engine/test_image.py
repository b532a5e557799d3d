"""Image resolution against the real Docker engine: a tiny image imported locally (no pull), removed after."""
import secrets
import time

import docker
import pytest

from onegpu.core.outcomes import Blocked
from onegpu.engine.image import describe_image, resolve_image
from tests_offline.tiny_image import tiny_rootfs


@pytest.fixture
def local_image(docker_client):
    """(reference, id) of a freshly imported image labelled onegpu.test=1; removed at teardown."""
    repo, tag = "onegpu-test-image", secrets.token_hex(6)
    docker_client.api.import_image_from_data(tiny_rootfs(b"onegpu image resolution test\n"), repository=repo,
                                             tag=tag, changes=["LABEL onegpu.test=1"])
    image = docker_client.images.get(f"{repo}:{tag}")
    try:
        yield f"{repo}:{tag}", image.id
    finally:
        docker_client.images.remove(image.id, force=True)


def test_a_local_tag_resolves_to_its_immutable_id(docker_client, local_image):
    reference, image_id = local_image
    facts = resolve_image(docker_client, reference)
    assert facts.id == image_id and facts.id.startswith("sha256:") and len(facts.id) == 71
    assert facts.reference == reference and facts.repo_tags == [reference]
    assert facts.repo_digests == []  # imported locally: it never came from a registry
    lines = describe_image(facts)
    assert image_id in lines[0] and "never pulled" in lines[0] and "digests: none" in lines[1]


def test_an_image_id_resolves_to_itself(docker_client, local_image):
    reference, image_id = local_image
    assert resolve_image(docker_client, image_id).id == image_id
    assert resolve_image(docker_client, image_id).repo_tags == [reference]


def test_a_missing_reference_is_image_missing_and_nothing_is_pulled(docker_client):
    missing = f"onegpu-test-missing/never-there:{secrets.token_hex(6)}"
    since = int(time.time()) - 1
    with pytest.raises(Blocked) as blocked:
        resolve_image(docker_client, missing)
    until = int(time.time()) + 1
    assert blocked.value.code == "IMAGE_MISSING"
    assert missing in blocked.value.message and "never pulls" in blocked.value.message
    assert docker_client.images.list(name=missing.rsplit(":", 1)[0]) == []
    pulls = list(docker_client.events(since=since, until=until, decode=True,
                                      filters={"type": "image", "event": "pull"}))
    assert [e for e in pulls if "never-there" in str(e)] == []


def test_a_malformed_reference_is_image_missing_not_a_traceback(docker_client):
    with pytest.raises(Blocked) as blocked:
        resolve_image(docker_client, "Not A Valid Reference!")
    assert blocked.value.code == "IMAGE_MISSING" and "Not A Valid Reference!" in blocked.value.message


def test_an_engine_that_does_not_answer_is_no_docker(tmp_path):
    client = docker.DockerClient(base_url=f"unix://{tmp_path}/no-daemon.sock", version="1.41", timeout=2)
    try:
        with pytest.raises(Blocked) as blocked:
            resolve_image(client, "vllm/vllm-openai:v0.11.0")
    finally:
        client.close()
    assert blocked.value.code == "NO_DOCKER"


def test_the_direct_socket_path_answers_as_the_sdk_does(docker_client, local_image, monkeypatch):
    # resolve_local_image asks a local socket without the docker SDK; its facts and its IMAGE_MISSING must be the
    # SDK's, and what it cannot answer cleanly (a malformed reference: 400) goes back to the SDK path
    from onegpu.engine.image import _resolve_on_socket, resolve_local_image
    from onegpu.machine.docker_api import NotAnswered

    monkeypatch.delenv("DOCKER_HOST", raising=False)
    reference, image_id = local_image
    for ref in (reference, image_id):
        assert _resolve_on_socket(ref) == resolve_image(docker_client, ref) == resolve_local_image(ref)
    missing = f"onegpu-test-missing/never-there:{secrets.token_hex(6)}"
    with pytest.raises(Blocked) as direct:
        _resolve_on_socket(missing)
    with pytest.raises(Blocked) as sdk:
        resolve_image(docker_client, missing)
    assert (direct.value.code, direct.value.message) == (sdk.value.code, sdk.value.message)
    with pytest.raises(NotAnswered):
        _resolve_on_socket("Not A Valid Reference!")
    with pytest.raises(Blocked) as malformed:
        resolve_local_image("Not A Valid Reference!")
    assert malformed.value.code == "IMAGE_MISSING"
