"""The failure table (onegpu.engine.failure_table): each row is one wording, and its example is its test.

An example is a public GPU log (gpu_logs/NAME), a recording of the real CPU engine (engine_logs/NAME) or, for a
wording only vLLM's source shows so far, the line as its format string prints it. Every example must be classified
by its own row: not by an earlier, more general row, and not as nothing.
"""
from __future__ import annotations

import pytest

from onegpu.core.outcomes import ADVICE, CODES
from onegpu.engine.bootlog import classify_lines, clean, explain_failure
from onegpu.engine.failure_table import FAILURES
from tests_offline.paths import REPO_ROOT

DATA = REPO_ROOT / "tests_offline" / "data"


def example_text(example: str) -> str:
    for prefix in ("gpu_logs/", "engine_logs/"):
        if example.startswith(prefix):
            return (DATA / f"{example}.log").read_text(encoding="utf-8")
    return example


@pytest.mark.parametrize("index", range(len(FAILURES)), ids=lambda i: f"{i}-{FAILURES[i].code}")
def test_each_rows_example_is_classified_by_that_row(index):
    row = FAILURES[index]
    found = classify_lines(clean(example_text(row.example)))
    assert found is not None, row
    assert found[0] is row, (row.code, found[0].code, found[1])


@pytest.mark.parametrize("index", range(len(FAILURES)), ids=lambda i: f"{i}-{FAILURES[i].code}")
def test_each_row_names_a_catalogued_code_with_advice_and_its_source(index):
    row = FAILURES[index]
    assert row.code in CODES and row.code in ADVICE
    assert row.source and row.phase in ("boot", "any")


def test_a_row_for_after_the_server_started_sees_past_the_startup_line():
    log = ("(APIServer pid=1) INFO:     Application startup complete.\n"
           "(EngineCore pid=9) ERROR 12-03 10:14:21 [core.py:1510] RuntimeError: CUDA error: an illegal memory "
           "access was encountered\n")
    assert explain_failure(log, 0, False, False, False).code == "CUDA_ERROR"
    # a boot-only wording printed after the server started is not a boot failure: the engine's own words stand
    late = log.replace("RuntimeError: CUDA error: an illegal memory access was encountered",
                       "ValueError: No available memory for the cache blocks.")
    failure = explain_failure(late, 0, False, False, False)
    assert failure.code == "ENGINE_DIED" and "No available memory" in failure.quote


def test_an_out_of_memory_error_is_load_oom_before_the_weights_loaded_and_profile_oom_after():
    oom = "(Worker pid=9) ERROR 12-03 10:14:21 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to " \
          "allocate 2.00 GiB.\n"
    loaded = "(Worker pid=9) INFO 12-03 10:14:20 [gpu_model_runner.py:2653] Model loading took 70.1 GiB memory and " \
             "30.1 seconds\n"
    assert explain_failure(oom, 1, False, False, False).code == "LOAD_OOM"
    assert explain_failure(loaded + oom, 1, False, False, False).code == "PROFILE_OOM"


def test_a_refusal_on_a_workers_error_lines_alone_is_named_not_engine_died():
    """The CPU build's memory refusal printed only by a worker, then the API server's wrapper: named as on the
    engine core's own line (it was ENGINE_DIED while the worker's prefix hid the message)."""
    line = ("(VllmWorker-0 pid=43) ERROR 12-03 10:14:21 [multiproc_executor.py:671] ValueError: Available memory on "
            "node 0 (3.61/6.0 GiB) on startup is less than desired CPU memory utilization (0.85, 5.1 GiB).")
    wrapper = ("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
               "{'EngineCore': 1}")
    for prefix in ("(VllmWorker-0 pid=43) ERROR 12-03 10:14:21 [multiproc_executor.py:671] ",
                   "(EngineCore pid=27) ERROR 12-03 10:14:21 [core.py:1510] "):
        log = line.replace("(VllmWorker-0 pid=43) ERROR 12-03 10:14:21 [multiproc_executor.py:671] ", prefix)
        failure = explain_failure(f"{log}\n{wrapper}\n", 1, False, False, False)
        assert failure.code == "HOST_MEMORY_EXHAUSTED"
        assert failure.quote.startswith("ValueError: Available memory on node 0 (3.61/6.0 GiB)")
