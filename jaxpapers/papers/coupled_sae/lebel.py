"""Multisubject coupled SAE (abstract 1): loader for real story-listening fMRI.

The public layout of LeBel et al. (2023, "A natural language fMRI dataset for voxelwise
encoding models", OpenNeuro ds003020), as used by the HuthLab `deep-fMRI-dataset` code:

    <root>/derivative/TextGrids/<story>.TextGrid             word timings (Praat, long format)
    <root>/derivative/respdict.json                           {story: number of TRs}
    <root>/derivative/preprocessed_data/<subject>/<story>.hf5 dataset "data" (or "resp"),
                                                              (TRs, voxels), per-story z-scored

Feature/response alignment follows that code: the TR grid of a story has
respdict[story] - 5 triggers every `tr` s starting 10 s before the sound (TR mid-points
sampled), the resampled features are trimmed by [5 + trim : -trim] (trim = 5) and must
then have exactly as many rows as the hf5 response. Words are the non-silent intervals of
the tier named like "word". Subjects may have different voxel counts (no common surface):
the methods zero-pad them to the widest subject with a mask, and the cross-subject map
analyses, which need surface-projected data, are not run on it.
"""
from __future__ import annotations

import json
import os
import re

import numpy as np

from jaxpapers.papers.coupled_sae import features as features_lib

_SILENT = {"", "sp", "sil", "sp.", "ns"}


def parse_textgrid(text: str) -> dict:
  """{tier name: [(xmin, xmax, label), ...]} from a long-format Praat TextGrid."""
  tiers, name, cur, iv = {}, None, None, {}
  for line in text.splitlines():
    s = line.strip()
    m = re.match(r'name\s*=\s*"(.*)"', s)
    if m:
      name = m.group(1)
      cur = tiers.setdefault(name, [])
      continue
    m = re.match(r"(xmin|xmax)\s*=\s*([-0-9.eE+]+)", s)
    if m and cur is not None:
      iv[m.group(1)] = float(m.group(2))
      continue
    m = re.match(r'text\s*=\s*"(.*)"\s*$', s)
    if m and cur is not None:
      cur.append((iv.get("xmin", np.nan), iv.get("xmax", np.nan), m.group(1)))
      iv = {}
  if not tiers:
    raise ValueError("no tiers found: not a long-format Praat TextGrid")
  return tiers


def words_from_textgrid(path: str, story: str) -> features_lib.Story:
  if not os.path.exists(path):
    raise FileNotFoundError(f"TextGrid {path} not found (LeBel et al. ds003020 layout: "
                            "<root>/derivative/TextGrids/<story>.TextGrid)")
  with open(path, encoding="utf-8", errors="replace") as f:
    tiers = parse_textgrid(f.read())
  names = [n for n in tiers if "word" in n.lower()]
  if not names:
    raise ValueError(f"{path}: no word tier (tiers: {', '.join(tiers)})")
  ivs = [(a, b, w) for a, b, w in tiers[names[0]]
         if w.strip().lower() not in _SILENT and not w.strip().startswith("{")]
  return features_lib.Story(story, [w.strip() for _, _, w in ivs],
                            np.array([a for a, _, _ in ivs]), np.array([b for _, b, _ in ivs]))


def read_response(path: str) -> np.ndarray:
  if not os.path.exists(path):
    raise FileNotFoundError(f"response file {path} not found (LeBel et al. ds003020 layout: "
                            "<root>/derivative/preprocessed_data/<subject>/<story>.hf5)")
  import h5py  # pylint: disable=g-import-not-at-top
  with h5py.File(path, "r") as f:
    key = "data" if "data" in f else ("resp" if "resp" in f else None)
    if key is None:
      raise ValueError(f"{path}: no 'data' or 'resp' dataset (has {', '.join(f)})")
    y = np.asarray(f[key], np.float32)
  if y.ndim != 2 or not np.all(np.isfinite(y)):
    raise ValueError(f"{path}: response must be a finite (TRs, voxels) array, got {y.shape}")
  return y


def tr_grid(n_trs_total: int, tr: float, start_s: float = 10.0, pad: int = 5) -> np.ndarray:
  """Mid-TR times relative to sound onset (HuthLab `load_simulated_trfiles`)."""
  return np.arange(n_trs_total - pad) * tr - start_s + tr / 2.0


def load(root: str, subjects, stories, tr: float = 2.0, trim: int = 5):
  """(Story list, {subject: [per-story responses]}, per-story TR times after trimming)."""
  d = os.path.join(root, "derivative")
  if not os.path.isdir(d):
    raise FileNotFoundError(f"{d} not found: point data.path at the root of OpenNeuro "
                            "ds003020 (LeBel et al. 2023), which holds derivative/")
  with open(os.path.join(d, "respdict.json")) as f:
    respdict = json.load(f)
  out_stories, times, resp = [], [], {s: [] for s in subjects}
  for story in stories:
    if story not in respdict:
      raise ValueError(f"story {story!r} is not in {d}/respdict.json")
    out_stories.append(words_from_textgrid(os.path.join(d, "TextGrids", f"{story}.TextGrid"),
                                           story))
    t = tr_grid(int(respdict[story]), tr)[5 + trim:-trim]
    times.append(t)
    for s in subjects:
      y = read_response(os.path.join(d, "preprocessed_data", s, f"{story}.hf5"))
      if y.shape[0] != len(t):
        raise ValueError(f"{s}/{story}.hf5 has {y.shape[0]} TRs but respdict gives "
                         f"{len(t)} after trimming ({respdict[story]} - 5 - 10 - 5)")
      resp[s].append(y)
  for s in subjects:
    nv = {y.shape[1] for y in resp[s]}
    if len(nv) != 1:
      raise ValueError(f"subject {s}: stories have different voxel counts {sorted(nv)}")
  return out_stories, resp, times


def write_example(root: str, subjects, stories, n_vox, rng, tr: float = 2.0):
  """Writes a tiny dataset in the LeBel layout (for tests and the README example).

  `n_vox`: one voxel count for every subject, or one per subject (real subjects differ).
  """
  n_vox = [int(n_vox)] * len(subjects) if np.ndim(n_vox) == 0 else [int(v) for v in n_vox]
  if len(n_vox) != len(subjects):
    raise ValueError(f"n_vox has {len(n_vox)} counts for {len(subjects)} subjects")
  import h5py  # pylint: disable=g-import-not-at-top
  d = os.path.join(root, "derivative")
  os.makedirs(os.path.join(d, "TextGrids"), exist_ok=True)
  vocab = "the king walked into a dark forest and saw light on water , she laughed".split()
  respdict = {}
  for story in stories:
    n_words = int(rng.integers(60, 90))
    words = [vocab[i] for i in rng.integers(0, len(vocab), n_words)]
    t = 0.0
    lines = ['File type = "ooTextFile"', 'Object class = "TextGrid"', "", "xmin = 0",
             "tiers? <exists>", "size = 2", "item []:"]
    ivs = [(0.0, 0.8, "sp")]
    t = 0.8
    for w in words:
      dur = 0.2 + 0.04 * len(w)
      ivs.append((t, t + dur, w))
      t += dur
    ivs.append((t, t + 1.0, "sp"))
    total = t + 1.0
    lines[3:4] = ["xmin = 0", f"xmax = {total}"]
    for k, (tier, items) in enumerate((("phone", [(0.0, total, "AH")]), ("word", ivs))):
      lines += [f"    item [{k + 1}]:", '        class = "IntervalTier"',
                f'        name = "{tier}"', "        xmin = 0", f"        xmax = {total}",
                f"        intervals: size = {len(items)}"]
      for i, (a, b, w) in enumerate(items):
        lines += [f"        intervals [{i + 1}]:", f"            xmin = {a}",
                  f"            xmax = {b}", f'            text = "{w}"']
    with open(os.path.join(d, "TextGrids", f"{story}.TextGrid"), "w") as f:
      f.write("\n".join(lines) + "\n")
    n_total = int(np.ceil((total + 10.0) / tr)) + 5 + 15
    respdict[story] = n_total
    n_resp = n_total - 5 - 15
    for s, nv in zip(subjects, n_vox):
      os.makedirs(os.path.join(d, "preprocessed_data", s), exist_ok=True)
      with h5py.File(os.path.join(d, "preprocessed_data", s, f"{story}.hf5"), "w") as f:
        f.create_dataset("data", data=rng.standard_normal((n_resp, nv)).astype(np.float32))
  with open(os.path.join(d, "respdict.json"), "w") as f:
    json.dump(respdict, f)
