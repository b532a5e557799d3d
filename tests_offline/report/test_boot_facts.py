"""The boot log's facts come from one table: the terminal line, report.html's boot section and summary-share.md's
boot line say every row of it in the same words, and a figure the log did not print is said the same way."""
from __future__ import annotations

import html

from onegpu.engine.bootlog import BootFacts as LoggedFacts
from onegpu.phases.load import boot_line
from onegpu.record.receipt import record_of
from onegpu.record.sections_load import BootFacts
from onegpu.report.boot_facts import NOT_REPORTED, ROWS, boot_fact_rows
from onegpu.report.sections import boot
from onegpu.report.share_summary import run_lines

FULL = {"kv_cache_gib": 3.12, "kv_cache_tokens": 25600, "max_concurrency": 3.125, "concurrency_tokens": 8192,
        "load_gib": 4, "load_s": 1.25, "cpu_offload_gib": 10.5, "server_started": True, "vllm_version": "0.34.0"}


def receipt_with(facts: dict) -> object:
    return record_of({"boot": {"ready": True, "elapsed_s": 12.5, "facts": facts}})


def test_every_row_is_said_in_the_same_words_on_the_terminal_in_the_report_and_in_the_public_summary():
    for facts in (FULL, {k: v for k, v in FULL.items() if k != "cpu_offload_gib"}):
        rows = boot_fact_rows(BootFacts(**facts))
        assert [label for label, _ in rows] == [label for label, _, _ in ROWS]
        terminal = boot_line(LoggedFacts(**facts), 12.5)
        page = boot(receipt_with(facts))
        share = "\n".join(run_lines(receipt_with(facts)))
        for label, said in rows:
            if said is None:  # the terminal line leaves it out; the report and the summary say so
                assert label not in terminal
                assert f"<td>{NOT_REPORTED}</td>" in page and f"{label} {NOT_REPORTED}" in share
            else:
                assert f"{label} {said}" in terminal and f"{label} {said}" in share
                assert f'<td class="og-k">{html.escape(label)}</td><td>{html.escape(said)}</td>' in page


def test_the_rows_state_the_figures_the_log_printed():
    said = dict(boot_fact_rows(BootFacts(**FULL)))
    assert said == {"weights": "4.00 GiB loaded in 1.2 s", "CPU offload": "10.50 GiB of parameters",
                    "KV cache pool": "3.12 GiB = 25,600 tokens", "maximum concurrency": "3.12x at 8,192 tokens"}
    assert boot_fact_rows(None) == [(label, None) for label, _, _ in ROWS]
