"""Latent debate (arXiv 2512.01909): one batched, cached pass of the LLM over a statement set.

For every prompt template the statements are encoded into one bucket length and run in
fixed-size chunks through `lm.batched_decompose` (one compiled program per template
kind). Each chunk's outputs are saved as an npz in `workdir/cache/<key>/` as soon as it
is computed, so a killed extraction resumes at the first missing chunk, and a study
that reuses the workdir does not pay for the forward passes again. The key hashes the
model, the statements, the templates, the probe layers and the chunk size.
"""
from __future__ import annotations

import hashlib
import json
import os
import time

import numpy as np

from jaxpapers.papers.latent_debate import lm as lm_lib, statements


def probe_layers(config, n_layers: int) -> tuple:
  return tuple(sorted({max(1, min(n_layers, int(round(f * n_layers))))
                       for f in config.probe.depths}))


def shot_examples(config, ss):
  """The few-shot examples: None (the fixed `lm.SHOTS`) or, with data.shot_source =
  'family', examples from the study families' own generators, none of them a study
  statement (`statements.family_examples`)."""
  if config.data.shot_source == "fixed" or config.data.shots == 0:
    return None
  if config.data.csv:
    raise ValueError("data.shot_source='family' needs generated families, not data.csv")
  return statements.family_examples(tuple(config.data.families), config.data.shots,
                                    exclude=ss.statements)


def cache_key(lm, ss, n_templates: int, layers, batch: int, shots: int = 0,
              examples=None) -> str:
  blob = {"lm": lm.name, "dims": [lm.cfg.dim, lm.cfg.n_layers],
          "statements": ss.statements, "templates": lm_lib.TEMPLATES[:n_templates],
          "layers": list(layers), "batch": batch}
  if shots:
    blob["prefixes"] = [lm_lib.prefix_text(lm, t, shots, examples)
                        for t in range(n_templates)]
  blob = json.dumps(blob)
  return hashlib.sha1(blob.encode()).hexdigest()[:12]


def extract(config, lm, ss, workdir: str | None, log=print) -> dict:
  """{'t0': {...decompose outputs, with probe and ccs}, 't1': {...}, ...} as numpy."""
  layers = probe_layers(config, lm.cfg.n_layers)
  n_t = config.data.n_templates
  batch = config.run.batch
  shots = config.data.shots
  examples = shot_examples(config, ss)
  key = cache_key(lm, ss, n_t, layers, batch, shots, examples)
  cache = os.path.join(workdir, "cache", key) if workdir else None
  if cache:
    os.makedirs(cache, exist_ok=True)
  # One bucket length for every template, so the two programs share their shapes.
  length = max(lm_lib.encode(lm, ss.statements, t)[0].shape[1] for t in range(n_t))
  fns = {}
  out = {}
  t_start = time.perf_counter()
  computed = 0
  n_chunks = -(-len(ss) // batch)
  for t in range(n_t):
    tokens, last = lm_lib.encode(lm, ss.statements, t, length)
    full = t == 0
    # Each template has its own few-shot prefix (same shots, the template's wording).
    fns[t] = lm_lib.batched_decompose(lm, layers if full else (), contrast=full,
                                      prefix=lm_lib.prefix_cache(lm, t, shots, examples))
    parts = []
    for c in range(n_chunks):
      path = os.path.join(cache, f"t{t}_c{c}.npz") if cache else None
      if path and os.path.exists(path):
        with np.load(path) as z:
          parts.append({k: z[k] for k in z.files})
        continue
      sl = slice(c * batch, (c + 1) * batch)
      part = lm_lib.run_rows(fns[t], lm.params, tokens[sl], last[sl], batch)
      if path:
        np.savez(path + ".tmp.npz", **part)
        os.replace(path + ".tmp.npz", path)
      parts.append(part)
      computed += 1
      el = time.perf_counter() - t_start
      left = n_t * n_chunks - (t * n_chunks + c + 1)
      log(f"extract template {t} chunk {c + 1}/{n_chunks} ({length} tokens x {batch} rows); "
          f"{batch * computed / el:.1f} rows/s, ETA {el / computed * left:.0f} s")
    out[f"t{t}"] = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
  d = out["t0"]
  gap = np.abs(d["dla"].sum(1) - (d["logit_true"] - d["logit_false"]))
  log(f"exact decomposition: max |sum of DLA arguments - logit difference| = {gap.max():.2e} "
      f"(logit differences up to {np.abs(d['logit_true'] - d['logit_false']).max():.2f})")
  out["probe_layers"] = layers
  out["length"] = length
  return out
