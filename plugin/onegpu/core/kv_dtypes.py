"""The --kv-cache-dtype values the kit knows, one row each: the settings check, the KV estimate and the version
check all read this table, so adding a dtype is one row here.

Sources of the version columns (the first vLLM version known to accept each value, and the last known to refuse
it; versions in between are "unknown", never guessed):
* fp8 (then E5M2): vllm-project/vllm#2279 "Support FP8-E5M2 KV Cache" (merged January 2024); fp8_e4m3 is
  documented for v0.4.2 (docs.vllm.ai/en/v0.4.2/quantization/fp8_e4m3_kvcache.html).
* bfloat16: handled as a --kv-cache-dtype value for DeepSeek V3.2 in vllm-project/vllm#25988 (2025-09-30),
  first released in v0.11.0; earlier releases are not known to accept it.
* float16: added to CacheDType by vllm-project/vllm#37199 (merged 2026-03-16); vLLM 0.17.0 refuses it
  ("Invalid kv_cache_dtype: float16. Valid values are: ('auto', 'bfloat16', 'fp8', ...)",
  vllm-project/vllm-ascend#7685); v0.18.0 was published four days after the merge, so only v0.19.0 on is
  known to accept it.
Element sizes: vllm/config/cache.py CacheDType. DiffKV: K and V head sizes that differ (MiMo-V2) run on the
DiffKV attention backends, which accept only some values (vllm/v1/attention/backends/triton_attn_diffkv.py
supported_kv_cache_dtypes; flash_attn_diffkv.py likewise).
"""
from __future__ import annotations

from msgspec import Struct


class KvDtype(Struct, frozen=True):
    name: str
    element_bytes: int | None  # None: "auto", the model's own dtype
    refused_below: str | None  # vLLM versions below this refuse it (None: none known to)
    accepted_from: str | None  # vLLM versions from this one accept it
    diff_kv: bool  # accepted by the DiffKV attention backends


KV_DTYPES: dict[str, KvDtype] = {row.name: row for row in (
    KvDtype("auto", None, None, "0", diff_kv=True),
    KvDtype("bfloat16", 2, None, "0.11.0", diff_kv=True),
    KvDtype("float16", 2, "0.18.0", "0.19.0", diff_kv=False),
    KvDtype("fp8", 1, None, "0.4.2", diff_kv=True),
    KvDtype("fp8_e4m3", 1, None, "0.4.2", diff_kv=True),
    KvDtype("fp8_e5m2", 1, None, "0.4.2", diff_kv=False),
)}
