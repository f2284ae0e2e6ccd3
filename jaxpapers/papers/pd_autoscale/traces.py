"""Learned autoscaling of PD-disaggregated LLM serving (abstract 12): real trace CSVs.

Reads a request trace from a user path in either public layout:

  Azure LLM inference trace 2023 (AzurePublicDataset, e.g. AzureLLMInferenceTrace_conv.csv):
      TIMESTAMP,ContextTokens,GeneratedTokens
      2023-11-16 18:15:46.6805900,374,44
  Vidur / Sarathi processed traces (e.g. data/processed_traces/*.csv):
      arrived_at,num_prefill_tokens,num_decode_tokens
      0.0,1200,180

TIMESTAMP is a date-time (up to 9 fractional digits) or seconds; arrived_at is seconds.
Extra columns are ignored. Arrivals are shifted to start at 0, sorted, optionally cut to a
window (`start_s`, `duration_s`) and time-scaled (`speedup` > 1 compresses time, i.e.
multiplies the rate). Any malformed row raises one ValueError naming the file and line.
"""
from __future__ import annotations

import csv
import os

import numpy as np

LAYOUTS = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "vidur": ("arrived_at", "num_prefill_tokens", "num_decode_tokens"),
}


def _seconds(text: str) -> float:
  """Seconds since the epoch of 'YYYY-MM-DD HH:MM:SS[.fffffffff]' (or a number)."""
  try:
    return float(text)
  except ValueError:
    pass
  head, _, frac = text.strip().partition(".")
  t = np.datetime64(head.replace(" ", "T"), "s").astype(np.int64)
  if frac and not frac.isdigit():
    raise ValueError(f"bad fractional seconds {frac!r}")
  return float(t) + (float("0." + frac) if frac else 0.0)


def load(path: str, start_s: float = 0.0, duration_s: float = 0.0, speedup: float = 1.0):
  """(arrival s, prompt tokens, output tokens) float64 arrays of a trace CSV."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"trace file {path} not found (download AzurePublicDataset's "
                            "AzureLLMInferenceTrace_conv.csv / _code.csv, or give a Vidur "
                            "processed trace)")
  if speedup <= 0:
    raise ValueError(f"trace speedup must be > 0, got {speedup}")
  with open(path, newline="") as f:
    reader = csv.reader(f)
    try:
      header = [h.strip() for h in next(reader)]
    except StopIteration:
      raise ValueError(f"{path}: empty file, expected a CSV header") from None
    layout = next((name for name, cols in LAYOUTS.items()
                   if all(c in header for c in cols)), None)
    if layout is None:
      raise ValueError(f"{path}: header {','.join(header)!r} has neither "
                       + " nor ".join(",".join(c) for c in LAYOUTS.values()))
    idx = [header.index(c) for c in LAYOUTS[layout]]
    rows = []
    for line, row in enumerate(reader, start=2):
      if not row or all(not c.strip() for c in row):
        continue
      try:
        if len(row) < len(header):
          raise ValueError(f"{len(row)} fields, header has {len(header)}")
        t = _seconds(row[idx[0]])
        p, o = float(row[idx[1]]), float(row[idx[2]])
        if not (np.isfinite(t) and np.isfinite(p) and np.isfinite(o)) or p < 1 or o < 0:
          raise ValueError("need finite time, prompt >= 1 and output >= 0 tokens")
      except ValueError as e:
        raise ValueError(f"{path}:{line}: malformed {layout} row {','.join(row)!r}: {e}") from None
      rows.append((t, p, o))
  if not rows:
    raise ValueError(f"{path}: no requests after the header")
  a = np.asarray(rows, np.float64)
  a = a[np.argsort(a[:, 0], kind="stable")]
  t = (a[:, 0] - a[0, 0]) / speedup
  keep = t >= start_s
  if duration_s > 0:
    keep &= t < start_s + duration_s
  if not keep.any():
    raise ValueError(f"{path}: no requests in [{start_s}, {start_s + duration_s}) s")
  # A request produces at least its first token (the prefill's).
  return t[keep] - start_s, a[keep, 1], np.maximum(a[keep, 2], 1.0)


def write(path: str, arr, prompt, output, layout: str = "azure",
          t0: str = "2023-11-16T18:00:00") -> str:
  """Writes a trace in a public layout (tests and the generated-file demo)."""
  cols = LAYOUTS[layout]
  with open(path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(cols)
    base = np.datetime64(t0, "ns")
    for t, p, o in zip(arr, prompt, output):
      if layout == "azure":
        stamp = str(base + np.timedelta64(int(round(t * 1e9)), "ns")).replace("T", " ")
        w.writerow([stamp[:27], int(p), int(o)])
      else:
        w.writerow([f"{t:.6f}", int(p), int(o)])
  return path
