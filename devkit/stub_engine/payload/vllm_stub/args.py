"""`vllm serve` command line as the stub accepts it: argparse-checked flags grouped like vLLM's.

Unknown flags end as vLLM's do: the top-level `vllm` parser's usage block, then `vllm: error: unrecognized
arguments: ...`, exit status 2 (recorded in tests_offline/data/engine_logs/fail-unknown-flag.log).
`--uds` exists only from vLLM 0.10.1 on, `--language-model-only` (as the stub knows it) from 0.32.0 on;
`--help=all` / `--help=<Group>` only on versions that print argument groups for a bare `--help`.
"""
from __future__ import annotations

import argparse
import sys

from .knobs import Knobs

USAGE = "vllm serve [model_tag] [options]"
SUBCOMMANDS = ("chat", "complete", "serve", "launch", "bench", "collect-env", "download-kernels", "preload",
               "run-batch", "snapshot")


def top_usage() -> str:
    """The top-level `vllm` parser's usage block, as argparse wraps it."""
    return f"usage: vllm [-h] [-v]\n            {{{','.join(SUBCOMMANDS)}}}\n            ...\n"
DESCRIPTION = "Launch a local OpenAI-compatible API server to serve LLM completions via HTTP."


def human_int(text: str) -> int:
    """vLLM's readable integers: 32768, 32k (x1000), 32K (x1024), 1m / 1M; raises ArgumentTypeError."""
    scale = {"k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2, "g": 1000**3, "G": 1024**3}
    try:
        if text and text[-1] in scale:
            return int(float(text[:-1]) * scale[text[-1]])
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer value: {text!r}") from None


# (group, flags, argparse kwargs). Only the flags a single-GPU serve command plausibly uses; enough
# that a launch line which is right for vLLM is accepted and a misspelt flag is not.
BOOL = argparse.BooleanOptionalAction
FLAGS: list[tuple[str, tuple[str, ...], dict]] = [
    ("options", ("--headless",), dict(action="store_true", help="Run in headless mode.")),
    ("options", ("--disable-log-stats",), dict(action="store_true", help="Disable logging statistics.")),
    ("options", ("--enable-log-requests",), dict(action=BOOL, default=False, help="Enable logging requests.")),
    ("options", ("--disable-log-requests",), dict(action=BOOL, default=True, help="[DEPRECATED] Disable logging requests.")),
    ("Frontend", ("--host",), dict(default=None, help="Host name.")),
    ("Frontend", ("--port",), dict(type=int, default=8000, help="Port number.")),
    ("Frontend", ("--uds",), dict(default=None, help="Unix domain socket path. If set, host and port arguments are ignored.")),
    ("Frontend", ("--api-key",), dict(nargs="+", default=None, help="If provided, the server will require one of these keys.")),
    ("Frontend", ("--uvicorn-log-level",), dict(default="info", choices=["critical", "debug", "error", "info", "trace", "warning"], help="Log level for uvicorn.")),
    ("Frontend", ("--disable-uvicorn-access-log",), dict(action=BOOL, default=False, help="Disable uvicorn access log.")),
    ("Frontend", ("--disable-frontend-multiprocessing",), dict(action=BOOL, default=False, help="Run the frontend in the engine process.")),
    ("Frontend", ("--chat-template",), dict(default=None, help="The file path to the chat template.")),
    ("Frontend", ("--max-log-len",), dict(type=int, default=None, help="Max number of prompt characters printed in log.")),
    ("ModelConfig", ("--model",), dict(default=None, help="Name or path of the Hugging Face model to use.")),
    ("ModelConfig", ("--served-model-name",), dict(nargs="+", default=None, help="The model name(s) used in the API.")),
    ("ModelConfig", ("--tokenizer",), dict(default=None, help="Name or path of the tokenizer.")),
    ("ModelConfig", ("--revision",), dict(default=None, help="The specific model version to use.")),
    ("ModelConfig", ("--trust-remote-code",), dict(action=BOOL, default=False, help="Trust remote code (e.g., from HuggingFace) when downloading the model and tokenizer.")),
    ("ModelConfig", ("--dtype",), dict(default="auto", choices=["auto", "bfloat16", "float", "float16", "float32", "half"], help="Data type for model weights and activations.")),
    ("ModelConfig", ("--seed",), dict(type=int, default=None, help="Random seed for reproducibility.")),
    ("ModelConfig", ("--max-model-len",), dict(type=human_int, default=None, help="Model context length (prompt and output).")),
    ("ModelConfig", ("--quantization", "-q"), dict(default=None, help="Method used to quantize the weights.")),
    ("ModelConfig", ("--enforce-eager",), dict(action=BOOL, default=False, help="Always use eager-mode PyTorch.")),
    ("ModelConfig", ("--generation-config",), dict(default="auto", help="The folder path to the generation config.")),
    ("LoadConfig", ("--load-format",), dict(default="auto", help="The format of the model weights to load.")),
    ("LoadConfig", ("--download-dir",), dict(default=None, help="Directory to download and load the weights.")),
    ("ParallelConfig", ("--tensor-parallel-size", "-tp"), dict(type=int, default=1, help="Number of tensor parallel groups.")),
    ("ParallelConfig", ("--pipeline-parallel-size", "-pp"), dict(type=int, default=1, help="Number of pipeline parallel groups.")),
    ("ParallelConfig", ("--data-parallel-size", "-dp"), dict(type=int, default=1, help="Number of data parallel groups.")),
    ("ParallelConfig", ("--distributed-executor-backend",), dict(default=None, choices=["external_launcher", "mp", "ray", "uni"], help="Backend to use for distributed model workers, either \"ray\" or \"mp\" (multiprocessing).")),
    ("ParallelConfig", ("--disable-custom-all-reduce",), dict(action=BOOL, default=False, help="Disable the custom all-reduce kernel.")),
    ("CacheConfig", ("--block-size",), dict(type=int, default=None, choices=[1, 8, 16, 32, 64, 128], help="Size of a contiguous cache block in number of tokens.")),
    ("CacheConfig", ("--gpu-memory-utilization",), dict(type=float, default=0.9, help="The fraction of GPU memory to be used for the model executor.")),
    ("CacheConfig", ("--swap-space",), dict(type=float, default=4, help="Size of the CPU swap space per GPU (in GiB).")),
    ("CacheConfig", ("--kv-cache-dtype",), dict(default="auto", choices=["auto", "bfloat16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2", "fp8_inc"], help="Data type for kv cache storage.")),
    ("CacheConfig", ("--enable-prefix-caching",), dict(action=BOOL, default=None, help="Whether to enable prefix caching.")),
    ("CacheConfig", ("--cpu-offload-gb",), dict(type=float, default=0, help="The space in GiB to offload to CPU, per GPU.")),
    ("CacheConfig", ("--kv-cache-memory-bytes",), dict(type=human_int, default=None, help="Size of KV Cache per GPU in bytes.")),
    ("CacheConfig", ("--enable-extensible-kv-cache",), dict(action=BOOL, default=None, help="Reserve the KV cache address range with device virtual memory and commit physical pages after warmup.")),
    ("SchedulerConfig", ("--max-num-batched-tokens",), dict(type=human_int, default=None, help="Maximum number of tokens to be processed in a single iteration.")),
    ("SchedulerConfig", ("--max-num-seqs",), dict(type=int, default=None, help="Maximum number of sequences to be processed in a single iteration.")),
    ("SchedulerConfig", ("--enable-chunked-prefill",), dict(action=BOOL, default=None, help="If True, prefill requests can be chunked based on the remaining max_num_batched_tokens.")),
    ("MultiModalConfig", ("--language-model-only",), dict(action=BOOL, default=False, help="If True, disables all multimodal inputs by setting all modality limits to 0. Equivalent to setting `--limit-mm-per-prompt` to 0 for every modality.")),
]
GROUP_DESCRIPTIONS = {
    "Frontend": "Arguments for the OpenAI-compatible frontend server.",
    "ModelConfig": "Configuration for the model.",
    "LoadConfig": "Configuration for loading the model weights.",
    "ParallelConfig": "Configuration for the distributed execution.",
    "CacheConfig": "Configuration for the KV cache.",
    "SchedulerConfig": "Scheduler configuration.",
    "MultiModalConfig": "Controls the behavior of multimodal models.",
}


def build_parser(knobs: Knobs) -> argparse.ArgumentParser:
    """The `vllm serve` parser of the stubbed version (no --uds before 0.10.1)."""
    parser = argparse.ArgumentParser(
        prog="vllm serve", usage=USAGE, description=DESCRIPTION, add_help=not knobs.help_groups,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False,
    )
    parser.add_argument("model_tag", nargs="?", default=None, help="The model tag to serve (optional if specified in config)")
    groups: dict[str, argparse._ActionsContainer] = {"options": parser}
    for group, flags, kwargs in FLAGS:
        if (flags[0] == "--uds" and not knobs.has_uds
                or flags[0] == "--language-model-only" and not knobs.has_language_model_only
                or flags[0] == "--enable-extensible-kv-cache" and not knobs.has_extensible_kv_cache):
            continue
        if flags[0] == "--gpu-memory-utilization" and knobs.has_extensible_kv_cache:
            # 0.34: unset resolves 1.0 with the extensible KV cache (config/cache.py:resolved_gpu_memory_utilization)
            kwargs = {**kwargs, "default": None}
        if group not in groups:
            groups[group] = parser.add_argument_group(group, GROUP_DESCRIPTIONS.get(group))
        groups[group].add_argument(*flags, **kwargs)
    if knobs.help_groups:
        parser.add_argument("-h", "--help", nargs="?", const="__groups__", default=None,
                            help="show this help message and exit; --help=all lists every flag")
    return parser


def group_help(parser: argparse.ArgumentParser, wanted: str) -> str:
    """`--help=<what>`: all flags, one group, or the flags whose name contains `wanted`."""
    if wanted == "all":
        return parser.format_help()
    lines = [f"usage: {USAGE}", ""]
    for group in parser._action_groups:  # argparse keeps groups private; reading them is enough here
        if group.title and group.title.lower() == wanted.lower():
            lines.append(f"{group.title}:")
            lines += [f"  {', '.join(a.option_strings) or a.dest}  {a.help or ''}" for a in group._group_actions]
            return "\n".join(lines) + "\n"
    key = wanted.lstrip("-").replace("_", "-")
    hits = [a for a in parser._actions if any(key in o for o in a.option_strings)]
    if not hits:
        return f"No group or parameter matching {wanted!r}\n"
    lines += [f"  {', '.join(a.option_strings)}  {a.help or ''}" for a in hits]
    return "\n".join(lines) + "\n"


def groups_summary(parser: argparse.ArgumentParser) -> str:
    """What a bare `--help` prints on recent vLLM: usage, the groups, and how to see every flag."""
    lines = [f"usage: {USAGE}", "", DESCRIPTION, "",
             "Search by using: `--help=<ConfigGroup>` to explore options by section (e.g.,",
             "--help=ModelConfig, --help=Frontend)",
             "  Use `--help=all` to show all available flags at once.", "", "Config Groups:"]
    for group in parser._action_groups[2:]:
        lines.append(f"  {group.title:<22}{group.description or ''}")
    return "\n".join(lines) + "\n"


def parse_serve(argv: list[str], knobs: Knobs) -> argparse.Namespace:
    """Parse `serve` arguments; prints help and exits 0, or argparse's error and exits 2."""
    parser = build_parser(knobs)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # vLLM's top-level parser reports what its `serve` subparser left over
        sys.stderr.write(f"{top_usage()}vllm: error: unrecognized arguments: {' '.join(unknown)}\n")
        sys.exit(2)
    if knobs.help_groups and args.help is not None:
        text = groups_summary(parser) if args.help == "__groups__" else group_help(parser, args.help)
        sys.stdout.write(text)
        sys.exit(0)
    if args.model_tag and args.model and args.model_tag != args.model:
        parser.error("With `vllm serve`, you should provide the model as a positional argument "
                     "or in a config file instead of via the `--model` option.")
    args.model = args.model_tag or args.model or "facebook/opt-125m"
    args.served_model_name = (args.served_model_name or [args.model])
    return args


def non_default_args(args: argparse.Namespace, knobs: Knobs) -> dict:
    """The `non-default args: {...}` dict vLLM logs at start."""
    parser = build_parser(knobs)
    defaults = {a.dest: a.default for a in parser._actions}
    return {k: v for k, v in vars(args).items() if k != "help" and k in defaults and v != defaults[k]}
