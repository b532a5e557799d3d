"""The engine image: a local reference resolved to its immutable ID (a local socket asked directly, any other
endpoint through the docker SDK). Never pulls.

`client.images.get` and the direct path both ask the daemon for an image it already has
(GET /images/<ref>/json); nothing here can fetch from a registry.
"""
from __future__ import annotations

import re

from msgspec import Struct, field

from onegpu.core.outcomes import Blocked

IMAGE_ID = re.compile(r"^sha256:[0-9a-f]{64}$")
CONNECT_TIMEOUT_S = 10
_MISSING = ("image {reference!r} does not exist on this Docker engine; the kit never pulls: load or build it "
            "locally (docker load / docker build), then scan again")


class ImageFacts(Struct, frozen=True):
    reference: str  # as the settings name it
    id: str  # sha256:<64 hex>: the container is created from this, never from the reference
    repo_tags: list[str] = field(default_factory=list)
    repo_digests: list[str] = field(default_factory=list)  # name@sha256:... the image had in a registry, if any
    created: str | None = None
    architecture: str | None = None
    os: str | None = None
    size_bytes: int | None = None


def resolve_image(client, reference: str) -> ImageFacts:
    """The local image `reference` names; raises Blocked IMAGE_MISSING (or NO_DOCKER), never pulls."""
    from docker.errors import APIError, DockerException, ImageNotFound
    from requests.exceptions import RequestException

    try:
        image = client.images.get(reference)
    except ImageNotFound:
        raise Blocked("IMAGE_MISSING", _MISSING.format(reference=reference)) from None
    except APIError as exc:
        if exc.status_code is not None and 400 <= exc.status_code < 500:
            raise Blocked("IMAGE_MISSING", f"image {reference!r} cannot be resolved by the Docker engine "
                                           f"({exc.status_code}: {exc.explanation}); the kit never pulls") from None
        raise
    except (DockerException, RequestException, OSError) as exc:
        raise Blocked("NO_DOCKER", f"the Docker engine did not answer while resolving {reference!r}: "
                                   f"{type(exc).__name__}: {exc}") from None
    attrs = image.attrs
    if not IMAGE_ID.match(image.id or ""):
        raise ValueError(f"the Docker engine returned image ID {image.id!r} for {reference!r}, not sha256:<64 hex>")
    return ImageFacts(reference=reference, id=image.id, repo_tags=list(attrs.get("RepoTags") or []),
                      repo_digests=list(attrs.get("RepoDigests") or []), created=attrs.get("Created"),
                      architecture=attrs.get("Architecture"), os=attrs.get("Os"), size_bytes=attrs.get("Size"))


def _resolve_on_socket(reference: str) -> ImageFacts:
    """resolve_image's answer from a local socket without the docker SDK (onegpu.machine.docker_api): the image, or
    IMAGE_MISSING for the 404 the SDK turns into ImageNotFound; raises NotAnswered for anything else."""
    from onegpu.machine.docker_api import LocalDaemon, NotAnswered
    from onegpu.machine.docker_facts import endpoint_from_env

    daemon = LocalDaemon(endpoint_from_env(), CONNECT_TIMEOUT_S)
    status, attrs = daemon.get("/images/{0}/json", reference)
    message = attrs.get("message") if isinstance(attrs, dict) else None
    if status == 404 and isinstance(message, str) and "no such image" in message.lower():
        raise Blocked("IMAGE_MISSING", _MISSING.format(reference=reference))  # the SDK's ImageNotFound
    if status != 200 or not isinstance(attrs, dict):
        raise NotAnswered(f"image {reference!r}: {status}")
    image_id = attrs.get("Id")
    if not isinstance(image_id, str) or not IMAGE_ID.match(image_id):
        raise NotAnswered(f"image {reference!r}: ID {image_id!r}")  # the SDK path words the refusal
    return ImageFacts(reference=reference, id=image_id, repo_tags=list(attrs.get("RepoTags") or []),
                      repo_digests=list(attrs.get("RepoDigests") or []), created=attrs.get("Created"),
                      architecture=attrs.get("Architecture"), os=attrs.get("Os"), size_bytes=attrs.get("Size"))


def resolve_local_image(reference: str) -> ImageFacts:
    """Resolve on the Docker engine DOCKER_HOST names (or the default socket); Blocked NO_DOCKER if none answers."""
    from onegpu.machine.docker_api import NotAnswered

    try:
        return _resolve_on_socket(reference)
    except NotAnswered:
        pass  # another kind of endpoint, or no clean answer: the SDK asks, and words any error
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=CONNECT_TIMEOUT_S)
    except DockerException as exc:
        raise Blocked("NO_DOCKER", f"no Docker engine to resolve {reference!r}: {exc}") from None
    try:
        return resolve_image(client, reference)
    finally:
        client.close()


def describe_image(image: ImageFacts) -> list[str]:
    """Fact lines: the reference, the immutable ID, tags and digests."""
    lines = [f"image {image.reference!r} resolves to {image.id} (the container is created from this ID, never "
             "pulled)"]
    lines.append(f"  tags: {', '.join(image.repo_tags) or 'none'}; digests: {', '.join(image.repo_digests) or 'none'}")
    if image.architecture or image.size_bytes is not None:
        lines.append(f"  {image.os or '?'}/{image.architecture or '?'}, {image.size_bytes or 0:,} bytes, created "
                     f"{image.created or 'unknown'}")
    return lines
