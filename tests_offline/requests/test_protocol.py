"""protocol.json binding: own schema and the earlier kit's, placeholders refused, every mismatch named."""
from __future__ import annotations

import hashlib
import json

import pytest

from devkit.request_corpus import BAD_PROTOCOLS, CONTEXT, REQUESTS_SHA256, legacy_protocol, own_protocol
from onegpu.requests import protocol as pb
from tests_offline.paths import DATA

COMPAT = DATA / "compat"


def bind(doc_or_bytes, **over) -> pb.Protocol:
    raw = doc_or_bytes if isinstance(doc_or_bytes, bytes) else json.dumps(doc_or_bytes).encode()
    kw = {"path": "p.json", "context_tokens": CONTEXT, "requests_sha256": REQUESTS_SHA256, **over}
    return pb.bind_protocol(raw, **kw)


def test_own_schema_binds_identities_policy_context_and_hash():
    bound = bind(own_protocol())
    assert (bound.benchmark, bound.split, bound.harness, bound.dataset_items) == ("gsm8k", "test",
                                                                                 "lm-evaluation-harness", 1319)
    assert bound.requests_sha256 == REQUESTS_SHA256 and bound.context_tokens == CONTEXT
    assert bound.sha256 == hashlib.sha256(json.dumps(own_protocol()).encode()).hexdigest()


def test_hash_may_be_written_in_capitals():
    assert bind(own_protocol(requests_sha256=REQUESTS_SHA256.upper())).requests_sha256 == REQUESTS_SHA256


def test_earlier_kits_example_is_read_and_its_placeholders_refused_as_placeholders():
    raw = (COMPAT / "protocol.example.json").read_bytes()
    with pytest.raises(pb.ProtocolError) as refused:
        pb.bind_protocol(raw, path="protocol.example.json", context_tokens=2048, requests_sha256=REQUESTS_SHA256)
    errors = refused.value.errors
    assert len(errors) == 5 and all("is a placeholder" in e for e in errors), errors
    assert {e.split(":")[0] for e in errors} == {"field benchmark_id", "field harness_revision",
                                                 "field dataset_revision", "field scorer_revision",
                                                 "field requests_sha256"}


def test_earlier_kits_example_filled_in_loads():
    doc = json.loads((COMPAT / "protocol.example.json").read_bytes())
    doc.update(benchmark_id="gsm8k test", harness_revision="lm-eval a1b2c3d 5-shot",
               dataset_revision="openai/gsm8k e53f048 1319 items", scorer_revision="exact_match a1b2c3d",
               requests_sha256=REQUESTS_SHA256)
    bound = bind(doc, context_tokens=2048)
    assert bound.source_schema == pb.LEGACY_SCHEMA and bound.harness is None
    assert bound.harness_revision == "lm-eval a1b2c3d 5-shot" and bound.context_tokens == 2048
    assert bind(legacy_protocol()).benchmark == "gsm8k test"


@pytest.mark.parametrize("name,data,expected", BAD_PROTOCOLS, ids=[c[0] for c in BAD_PROTOCOLS])
def test_bad_protocol_is_refused_naming_field_value_and_rule(name, data, expected):
    with pytest.raises(pb.ProtocolError) as refused:
        bind(data)
    errors = refused.value.errors
    for fragments in expected:
        assert any(all(f in e for f in fragments) for e in errors), (fragments, errors)


def test_all_mismatches_are_reported_at_once():
    doc = own_protocol(context_tokens=1, requests_sha256="f" * 64, interaction="chat", timing_policy="timed")
    with pytest.raises(pb.ProtocolError) as refused:
        bind(doc)
    fields = [e.split(":")[0] for e in refused.value.errors]
    assert fields == ["field interaction", "field timing_policy", "field context_tokens", "field requests_sha256"]


def test_a_missing_field_is_reported_once_as_required():
    with pytest.raises(pb.ProtocolError) as refused:
        bind({k: v for k, v in legacy_protocol().items() if k != "context"})
    assert refused.value.errors == ["field context: required"]


def test_missing_file_is_refused_plainly(tmp_path):
    with pytest.raises(pb.ProtocolError, match="no such file"):
        pb.load_protocol(tmp_path / "p.json", context_tokens=CONTEXT, requests_sha256=REQUESTS_SHA256)


def test_describe_names_what_the_file_is_bound_to():
    lines = pb.describe(bind(own_protocol()))
    assert REQUESTS_SHA256 in lines[0] and "harness lm-evaluation-harness @ v0.4.9 a1b2c3d" in lines[1]
    assert "independent_requests, offline-no-per-request-deadline, context 4096 tokens" == lines[2]
