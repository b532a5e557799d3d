"""Settings: the kit's own schema and the earlier kit's axm/one-gpu-settings@1, read strictly.

Every broken rule is reported at once, each naming the field, the value and the rule; never a traceback.
"""
from __future__ import annotations

import hashlib
import json

import pytest

from onegpu.core import strict_json
from onegpu.plan.settings import ASSUMED_DEFAULTS, LEGACY_SCHEMA, OWN_SCHEMA, Settings, load_settings
from tests_offline.paths import REPO_ROOT
from tests_offline.settings_docs import LEGACY_EXAMPLE, OWN_FULL, OWN_MINIMAL, REVISION, errors_of, legacy_filled, write

# --- the earlier kit's schema ------------------------------------------------------------------------------

def test_earlier_example_is_read_as_its_schema_and_only_its_placeholders_are_refused():
    errors = errors_of(LEGACY_EXAMPLE)
    assert errors == [
        "field 'model_revision': value \"REPLACE_WITH_EXACT_40_HEX_REVISION\" is a placeholder: replace it with "
        "the real value",
        "field 'model_path': value \"/choose/an/existing/local/checkpoint\" is a placeholder: replace it with the "
        "real value",
    ]


def test_earlier_example_filled_in_loads_with_the_documented_field_mapping(tmp_path):
    path = legacy_filled(tmp_path)
    s = load_settings(path)
    assert s.source_schema == LEGACY_SCHEMA and s.path == str(path)
    assert s.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (s.model_id, s.model_revision, s.model_path, s.image) == (
        "XiaomiMiMo/MiMo-V2.6-Pro-RL", REVISION, "/srv/models/mimo-v2.6-pro", "vllm/vllm-openai:mimov25-cu129")
    assert s.gpu == 0                      # gpu_index
    assert s.context_tokens == 2048        # context = max model length
    assert s.prefill_chunk_tokens == 512   # prefill_chunk = max batched tokens
    assert s.cpu_offload_gib == 512.0      # offload_gib = CPU-offload GiB
    assert s.container_ram_gib == 576.0    # ram_limit_gib = container RAM cap
    assert s.host_headroom_gib == 32.0     # reserve_gib = host headroom
    assert s.container_cpus == 8.0         # cpus = container CPU quota
    assert s.deadline_s == 1800            # timeout_s = the overall deadline
    assert s.max_requests == 1             # max_requests = the cap on request lines


def test_knobs_the_earlier_schema_lacks_are_assumed_and_listed(tmp_path):
    s = load_settings(legacy_filled(tmp_path))
    assert set(s.assumed) == {"gpu_reserve_gib", "kv_cache_dtype", "trust_remote_code", "request_timeout_s",
                              "serve_window_s", "shm_gib", "pids_limit", "free_floor_gib", "boot_deadline_s",
                              "offload_pinning"}
    assert s.offload_pinning == "rounded" and s.assumed["offload_pinning"].startswith("rounded (vLLM's default")
    assert s.kv_cache_dtype is None and s.assumed["kv_cache_dtype"].startswith("none (the model's own dtype")
    assert s.trust_remote_code is False and s.assumed["trust_remote_code"].startswith("False (")
    assert s.gpu_reserve_gib == ASSUMED_DEFAULTS["gpu_reserve_gib"][0]
    assert s.boot_deadline_s == 1800 and s.assumed["boot_deadline_s"] == "1800 (the overall deadline)"
    assert (s.shm_gib, s.pids_limit) == (16.0, 4096)


def test_earlier_schema_refuses_the_kits_own_field_names(tmp_path):
    doc = json.loads(legacy_filled(tmp_path).read_text())
    doc["context_tokens"] = doc.pop("context")
    errors = errors_of(write(tmp_path, doc))
    assert errors == [f"field 'context_tokens': value 2048: unknown field (not in {LEGACY_SCHEMA})",
                      "field 'context': required"]


# --- the kit's own schema ----------------------------------------------------------------------------------

def test_own_schema_minimal_file_loads_and_says_what_it_assumed(tmp_path):
    s = load_settings(write(tmp_path, OWN_MINIMAL))
    assert isinstance(s, Settings) and s.source_schema == OWN_SCHEMA
    assert (s.context_tokens, s.prefill_chunk_tokens, s.cpu_offload_gib, s.container_ram_gib) == (
        32768, 2048, 640.0, 800.0)
    assert s.container_cpus is None and "container_cpus" in s.assumed
    assert set(s.assumed) == set(ASSUMED_DEFAULTS) | {"boot_deadline_s"}


def test_own_schema_full_file_assumes_nothing(tmp_path):
    s = load_settings(write(tmp_path, OWN_FULL))
    assert s.assumed == {}
    assert s.gpu == "GPU-cb3dfa52-e2f3-9ca4-a399-7d16041c3732"
    assert (s.kv_cache_dtype, s.trust_remote_code, s.gpu_reserve_gib, s.container_cpus) == ("fp8", True, 6.5, 16.0)
    assert (s.boot_deadline_s, s.serve_window_s, s.pids_limit, s.max_requests) == (3600, 1800, 8192, 500)
    assert s.offload_pinning == "exact"


@pytest.mark.parametrize("value", ["rounded", "exact"])
def test_offload_pinning_takes_its_two_values(tmp_path, value):
    s = load_settings(write(tmp_path, {**OWN_MINIMAL, "offload_pinning": value}))
    assert s.offload_pinning == value and "offload_pinning" not in s.assumed


@pytest.mark.parametrize("value", ["Exact", "pow2", "", None, True, 1, ["exact"]])
def test_offload_pinning_refuses_anything_else_naming_field_value_and_rule(tmp_path, value):
    (error,) = errors_of(write(tmp_path, {**OWN_MINIMAL, "offload_pinning": value}))
    assert error == (f"field 'offload_pinning': value {json.dumps(value)}: must be \"rounded\" (vLLM's default: "
                     "each offloaded parameter pinned by torch's allocator, rounded up to a power of two) or "
                     "\"exact\" (the engine gets VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1)")


def test_the_earlier_schema_has_no_offload_pinning_field(tmp_path):
    doc = json.loads(legacy_filled(tmp_path).read_text())
    errors = errors_of(write(tmp_path, {**doc, "offload_pinning": "exact"}))
    assert errors == [f"field 'offload_pinning': value \"exact\": unknown field (not in {LEGACY_SCHEMA})"]


# --- refusals ------------------------------------------------------------------------------------------------

def test_every_broken_rule_is_reported_at_once_with_field_value_and_rule(tmp_path):
    bad = {**OWN_MINIMAL, "context_tokens": True, "prefill_chunk_tokens": 0, "cpu_offload_gib": "lots",
           "model_path": "models/mimo", "model_revision": "main", "gpu": "cuda:0", "shm_gib": 0.01,
           "kv_cache_dtype": "fp4", "trust_remote_code": "yes", "colour": "blue"}
    del bad["deadline_s"]
    errors = errors_of(write(tmp_path, bad))
    assert errors == [
        f"field 'colour': value \"blue\": unknown field (not in {OWN_SCHEMA})",
        "field 'deadline_s': required",
        "field 'model_revision': value \"main\": must be the 40-character lowercase hex commit of the model "
        "repository",
        "field 'model_path': value \"models/mimo\": must be an absolute path (a relative path would depend on where "
        "pytest runs)",
        "field 'gpu': value \"cuda:0\": must be a GPU index from 0 to 63 or a GPU UUID (GPU-...)",
        "field 'context_tokens': value true: must be an integer (a boolean is not) from 1 to 16777216",
        "field 'prefill_chunk_tokens': value 0: must be from 1 to 16777216",
        "field 'cpu_offload_gib': value \"lots\": must be a finite number (a boolean is not) from 0 to 65536",
        "field 'shm_gib': value 0.01: must be from 0.0625 to 4096",
        "field 'kv_cache_dtype': value \"fp4\": must be one of auto, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2 or "
        "null",
        "field 'trust_remote_code': value \"yes\": must be true or false",
    ]


@pytest.mark.parametrize("field, value", [
    ("context_tokens", True), ("deadline_s", False), ("cpu_offload_gib", True), ("gpu", True), ("gpu", False),
    ("pids_limit", True),
])
def test_a_boolean_is_not_a_number(tmp_path, field, value):
    (error,) = errors_of(write(tmp_path, {**OWN_MINIMAL, field: value}))
    assert error.startswith(f"field {field!r}: value {json.dumps(value)}: must be")


@pytest.mark.parametrize("field, value", [("context_tokens", 2048.0), ("deadline_s", 1.5)])
def test_an_integer_field_refuses_fractions(tmp_path, field, value):
    (error,) = errors_of(write(tmp_path, {**OWN_MINIMAL, field: value}))
    assert "must be an integer" in error


@pytest.mark.parametrize("text, expected", [
    ('{"schema": "onegpu/settings@1", "cpu_offload_gib": NaN}', "NaN is not a JSON number"),
    ('{"schema": "onegpu/settings@1", "cpu_offload_gib": Infinity}', "Infinity is not a JSON number"),
    ('{"schema": "onegpu/settings@1", "cpu_offload_gib": 1e400}', "1e400 is beyond the range of a 64-bit float"),
    ('{"schema": "onegpu/settings@1", "gpu": 0, "gpu": 1}', "duplicate key 'gpu'"),
    ('{"schema": "onegpu/settings@1",}', "not valid JSON at line 1 column 32"),
])
def test_strict_json_refuses_nan_duplicates_and_garbage(tmp_path, text, expected):
    (error,) = errors_of(write(tmp_path, text))
    assert expected in error


def test_strict_json_reads_floats_up_to_the_edge_of_the_64_bit_range():
    assert strict_json.loads("[1.7976931348623157e308, -1.7976931348623157e308, 1e-400, -0.0]") == [
        1.7976931348623157e308, -1.7976931348623157e308, 0.0, -0.0]  # underflow rounds; it is not refused
    for text in ("1.7976931348623159e308", "1E400", "-" + "9" * 400 + ".0"):
        with pytest.raises(strict_json.StrictJSONError, match="beyond the range of a 64-bit float"):
            strict_json.loads(f'{{"x": {text}}}')


@pytest.mark.parametrize("path, rule", [
    ("models/mimo", "must be an absolute path"), ("./mimo", "must be an absolute path"),
    ("~/models/mimo", "must be absolute ('~' is not expanded)"), ("~operator/mimo", "'~' is not expanded"),
    ("", "must be a non-empty path"),
])
def test_relative_and_home_paths_are_refused(tmp_path, path, rule):
    (error,) = errors_of(write(tmp_path, {**OWN_MINIMAL, "model_path": path}))
    assert error.startswith(f"field 'model_path': value {json.dumps(path)}") and rule in error


@pytest.mark.parametrize("revision", ["main", REVISION.upper(), REVISION[:-1], REVISION + "0", "v1.0", 12345])
def test_revision_must_be_a_full_lowercase_commit(tmp_path, revision):
    (error,) = errors_of(write(tmp_path, {**OWN_MINIMAL, "model_revision": revision}))
    assert error.startswith(f"field 'model_revision': value {json.dumps(revision)}")


@pytest.mark.parametrize("gpu", [-1, 64, "0", "cuda:0", "GPU-xyz", "GPU-", 0.0, None])
def test_bad_gpu_selectors(tmp_path, gpu):
    (error,) = errors_of(write(tmp_path, {**OWN_MINIMAL, "gpu": gpu}))
    assert error == f"field 'gpu': value {json.dumps(gpu)}: must be a GPU index from 0 to 63 or a GPU UUID (GPU-...)"


@pytest.mark.parametrize("gpu", [0, 63, "GPU-cb3dfa52-e2f3-9ca4-a399-7d16041c3732",
                                 "MIG-171566b8-60f0-9c5e-7388-59b5583f7b97"])
def test_good_gpu_selectors(tmp_path, gpu):
    assert load_settings(write(tmp_path, {**OWN_MINIMAL, "gpu": gpu})).gpu == gpu


@pytest.mark.parametrize("image, ok", [
    ("vllm/vllm-openai:v0.11.0", True), ("registry.local:5000/vllm:mimo", True), ("sha256:" + "a" * 64, True),
    ("vllm/vllm-openai@sha256:" + "b" * 64, True), ("VLLM/Upper:tag", False), ("vllm/vllm-openai@sha256:abc", False),
    ("", False), ("vllm openai", False),
])
def test_image_reference_shapes(tmp_path, image, ok):
    path = write(tmp_path, {**OWN_MINIMAL, "image": image})
    if ok:
        assert load_settings(path).image == image
    else:
        assert errors_of(path)[0].startswith(f"field 'image': value {json.dumps(image)}")


def test_unknown_schema_and_non_object_documents(tmp_path):
    assert errors_of(write(tmp_path, {**OWN_MINIMAL, "schema": "onegpu/settings@2"})) == [
        f"field 'schema': value \"onegpu/settings@2\": must be {OWN_SCHEMA!r} or {LEGACY_SCHEMA!r}"]
    assert errors_of(write(tmp_path, "[1, 2]")) == ["the document must be a JSON object, found list"]


def test_unreadable_files_are_refused_plainly(tmp_path):
    assert errors_of(tmp_path / "absent.json") == ["no such file"]
    big = tmp_path / "big.json"
    big.write_text(" " * 1_000_001)
    assert errors_of(big) == ["1000001 bytes: a settings file must be under 1,000,000 bytes"]
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"schema": "onegpu/settings@1", "model_id": "caf\xe9"}')
    (error,) = errors_of(latin)
    assert "utf-8" in error.lower()


# --- through pytest ---------------------------------------------------------------------------------------------

SETTINGS_TEST = ("import pytest\n"
                 "pytestmark = [pytest.mark.scan, pytest.mark.phase('plan')]\n"
                 "def test_settings_are_valid(settings):\n    pass\n")


def test_bad_settings_file_is_one_blocked_fact_listing_every_error(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_2_plan": SETTINGS_TEST})
    doc = {**OWN_MINIMAL, "context_tokens": True, "model_path": "~/mimo", "gpu": -1}
    (kit_project.path / "bad.json").write_text(json.dumps(doc))
    result = kit_project.runpytest("-m", "scan", "--settings", "bad.json", "-rx")
    result.assert_outcomes(xfailed=1)
    out = result.stdout.str()
    assert "Traceback" not in out and "Error" not in out.replace("SettingsError", "")
    result.stdout.fnmatch_lines(['*BLOCKED SETTINGS_INVALID: bad.json: field \'model_path\': value "~/mimo"*'
                                 "; field 'gpu': value -1*; field 'context_tokens': value true*"])
    receipt = json.loads(next((kit_project.path / "runs").iterdir()).joinpath("receipt.json").read_text())
    (entry,) = receipt["tests"].values()
    assert (entry["outcome"], entry["code"], entry["numbers"]) == ("blocked", "SETTINGS_INVALID", {"errors": 3})
    assert len(receipt["settings_errors"]) == 3


def test_earlier_example_through_pytest_blocks_on_its_placeholders(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_2_plan": SETTINGS_TEST})
    (kit_project.path / "legacy.json").write_bytes(LEGACY_EXAMPLE.read_bytes())
    result = kit_project.runpytest("-m", "scan", "--settings", "legacy.json", "-rx")
    result.assert_outcomes(xfailed=1)
    result.stdout.fnmatch_lines(["*BLOCKED SETTINGS_INVALID: legacy.json: field 'model_revision': value "
                                 '"REPLACE_WITH_EXACT_40_HEX_REVISION" is a placeholder*'])


def test_missing_settings_is_its_own_blocked_fact(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_2_plan": SETTINGS_TEST})
    result = kit_project.runpytest("-m", "scan", "-rx")
    result.assert_outcomes(xfailed=1)
    result.stdout.fnmatch_lines(["*BLOCKED NO_SETTINGS: no --settings file given*"])


ONE_READING = (
    "import pytest\n"
    "@pytest.mark.scan\n@pytest.mark.phase('plan')\n"
    "def test_the_plan_reads_the_settings(settings):\n    pass\n"
    "@pytest.mark.approve_load\n@pytest.mark.phase('load')\n"
    "def test_an_acting_test_reads_them_too(settings):\n    pass\n"
)


def test_a_session_reads_and_judges_its_settings_file_once(kit_project, monkeypatch):
    """An approved session reads the settings for its timeout backstop and for the plan: the file is read and
    validated once, and the run folder's copy is those very bytes."""
    import onegpu.session.glue as glue

    reads, judged = [], []
    read, judge = glue.read_settings_bytes, glue.settings_of_bytes
    monkeypatch.setattr(glue, "read_settings_bytes", lambda path: reads.append(path) or read(path))
    monkeypatch.setattr(glue, "settings_of_bytes", lambda raw, shown: judged.append(shown) or judge(raw, shown))
    demo = json.loads((REPO_ROOT / "examples" / "demo-settings.json").read_text())
    text = json.dumps({**demo, "model_path": str(kit_project.path / "model")}, indent=2).encode()
    (kit_project.path / "s.json").write_bytes(text)
    kit_project.makepyfile(**{"tests_hw/test_reading": ONE_READING})
    result = kit_project.runpytest("-m", "scan or approve_load", "--settings=s.json")
    result.assert_outcomes(passed=2)
    assert len(reads) == 1 and len(judged) == 1, (reads, judged)
    (folder,) = (kit_project.path / "runs").iterdir()
    assert (folder / "settings.json").read_bytes() == text
    receipt = json.loads((folder / "receipt.json").read_text())
    assert receipt["timeout_backstop_s"] > 7200  # the backstop was set from the same reading (deadline_s 7200)


def test_the_one_json_file_reader_is_bounded_and_strict(tmp_path):
    """Every JSON file of the kit goes through strict_json.load_file: a file over its limit is refused by its size
    before it is read (a sparse 1 TiB file costs nothing here), and what it reads is strict JSON."""
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(2**40)
    with pytest.raises(strict_json.JSONFileError) as big:
        strict_json.load_file(huge, 1_000_000)
    assert (big.value.kind, big.value.size) == ("too_large", 2**40)
    assert errors_of(huge) == [f"{2**40} bytes: a settings file must be under 1,000,000 bytes"]
    (tmp_path / "twice.json").write_bytes(b'{"a": 1, "a": 2}')
    with pytest.raises(strict_json.JSONFileError, match="duplicate key 'a'") as twice:
        strict_json.load_file(tmp_path / "twice.json", 100)
    assert twice.value.kind == "not_json"
    with pytest.raises(strict_json.JSONFileError, match="no such file") as missing:
        strict_json.load_file(tmp_path / "absent.json", 100)
    assert missing.value.kind == "missing"
    (tmp_path / "edge.json").write_bytes(b"[1]" + b" " * 97)
    assert strict_json.load_file(tmp_path / "edge.json", 100) == ([1], b"[1]" + b" " * 97)  # exactly at the limit
