"""lm-eval's local-completions model pointed at a serve window, in a child process, offline: a three-document
generation task read from local files (no dataset, tokenizer or Hub access)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data" / "lm_eval_adapter_smoke"


def write_task(folder: Path) -> Path:
    """The smoke task's YAML with the absolute path of its local documents."""
    text = (DATA / "task.yaml.in").read_text().replace("@DOCS@", str(DATA / "docs.jsonl"))
    (folder / "onegpu_adapter_smoke.yaml").write_text(text)
    return folder


# lm-eval's own entry point with its built-in task index left out (indexing ~200 task folders costs
# ~11 s per run here); the model, task and request path are the ones `lm_eval --model local-completions` uses.
DRIVER = """
import json, sys
from lm_eval import simple_evaluate
from lm_eval.tasks import TaskManager
out = simple_evaluate(model="local-completions", model_args=sys.argv[1], tasks=["onegpu_adapter_smoke"],
                      task_manager=TaskManager(include_path=sys.argv[2], include_defaults=False), log_samples=True)
print(json.dumps([s["resps"][0][0] for s in out["samples"]["onegpu_adapter_smoke"]]))
"""


def run_lm_eval(connection: dict, tmp_path: Path, model_args: str, base_path: str = "/v1/completions"):
    """lm-eval in a child process, offline: no Hub access, caches inside tmp_path."""
    env = {**os.environ, "OPENAI_API_KEY": connection["api_key"], "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(tmp_path / "hf"),
           "TOKENIZERS_PARALLELISM": "false"}
    model = f"base_url={connection['url']}{base_path},model={connection['model']},{model_args}"
    return subprocess.run([sys.executable, "-c", DRIVER, model, str(write_task(tmp_path))], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


