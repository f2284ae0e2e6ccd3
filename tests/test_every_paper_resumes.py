"""Every paper's training resumes exactly, or says why it needs no checkpoint (issue 11).

Each checkpointing paper carries its own kill/resume test (it knows where its run can be
stopped: a chunk, a phase, a stage); this file keeps that list complete. A new paper
fails here until it names its exact-resume test or the reason it does not checkpoint,
and a paper that starts checkpointing must name a test.
"""
import ast
import glob
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# paper -> "tests/file.py::test_name" (a kill after a checkpoint, a resume, a bitwise
# comparison with an uninterrupted run) or "no checkpoint: <why>".
RESUME_TESTS = {
    "bfmnet": "tests/test_bfmnet.py::test_resume_is_bitwise_exact",
    "coupled_sae": "tests/test_coupled_sae.py::"
                   "test_coupled_training_fits_voxels_and_resumes_exactly",
    "drift_ident": "no checkpoint: each study cell is one jitted scan of seconds; the "
                   "study caches finished cells",
    "flowgda": "tests/test_flowgda.py::test_resume_after_a_phase_is_exact",
    # The LM task on the unchanged core loop (jaxpapers/nn/lm.py); the loop's SIGKILL test
    # covers it.
    "hybrid_mup": "tests/test_core_resume.py::test_sigkill_then_resume_is_bitwise_exact",
    "latent_debate": "no checkpoint: nothing trains for more than seconds (probes, CCS); "
                     "the LM forward passes are cached per chunk in the workdir and reused",
    "lgs": "tests/test_lgs.py::test_training_is_deterministic_and_resumes_exactly",
    "lhdlm": "tests/test_lhdlm.py::test_training_resumes_exactly",
    "lie_bases": "tests/test_lie_bases.py::test_training_resumes_exactly_and_learns",
    # llops trains through the unchanged core.loop LM task; the loop's SIGKILL test covers it.
    "llops": "tests/test_core_resume.py::test_sigkill_then_resume_is_bitwise_exact",
    "lora_lr": "tests/test_lora_lr.py::"
               "test_pretraining_runs_on_the_core_loop_and_restores_its_checkpoint",
    "lpr": "tests/test_lpr.py::test_train_and_evaluate_resumes_exactly",
    "motor_adapters": "tests/test_motor_adapters.py::test_exact_resume",
    "neural_observer": "tests/test_neural_observer.py::test_run_resumes_bit_for_bit_after_a_kill",
    "perturbed_eg": "tests/test_perturbed_eg.py::test_resume_is_bitwise_exact",
    "pd_autoscale": "tests/test_pd_autoscale.py::test_training_resumes_exactly",
    "stgib": "tests/test_stgib.py::test_training_resumes_exactly",
    "visitation_reward": "tests/test_visitation_reward.py::test_smoke_train_resumes_exactly",
    "stompp": "tests/test_stompp.py::"
              "test_augmented_run_resumes_exactly_and_reports_the_committed_network",
}
# Papers whose resume test drives a loop that writes no metrics.jsonl (its rows are
# written afterwards from the returned curves); every other named test must compare the
# resumed run's whole metrics.jsonl with the uninterrupted run's (issue 36).
NO_METRICS = {
    "lgs": "train.fit logs to a callback; experiment writes its rows after fitting",
    "neural_observer": "Trainer.run returns its trace; experiment writes the rows from it",
}
COMPARE = "assert_same_metrics"  # tests/_runs.py
PAPERS = sorted(os.path.basename(os.path.dirname(p)) for p in
                glob.glob(os.path.join(ROOT, "jaxpapers", "papers", "*", "__init__.py")))


def _test_names(path):
  tree = ast.parse(open(os.path.join(ROOT, path)).read())
  return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _test_source(path, name):
  src = open(os.path.join(ROOT, path)).read()
  return next(ast.get_source_segment(src, n) for n in ast.walk(ast.parse(src))
              if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.parametrize("paper", sorted(RESUME_TESTS))
def test_resume_test_compares_every_metrics_row(paper):
  entry = RESUME_TESTS[paper]
  if entry.startswith("no checkpoint:") or paper in NO_METRICS:
    return
  path, _, name = entry.partition("::")
  assert COMPARE in _test_source(path, name), (
      f"{entry}: compare the resumed run's metrics.jsonl with the uninterrupted run's "
      f"(_runs.{COMPARE}), or say in NO_METRICS why its runs write none")


@pytest.mark.parametrize("paper", PAPERS)
def test_paper_names_its_exact_resume_test(paper):
  assert paper in RESUME_TESTS, (
      f"{paper}: add its exact-resume test (or 'no checkpoint: why') to RESUME_TESTS")
  entry = RESUME_TESTS[paper]
  checkpoints = any("Checkpointer" in open(f).read() for f in
                    glob.glob(os.path.join(ROOT, "jaxpapers", "papers", paper, "*.py")))
  if entry.startswith("no checkpoint:"):
    assert not checkpoints, f"{paper} checkpoints now: name its exact-resume test"
    return
  path, _, name = entry.partition("::")
  assert name in _test_names(path), f"{entry} does not exist"
