"""Run the study; stop it cleanly after a finished unit when the next one would not fit.
usage: python watch.py <budget_s> <unit_est_s> <ckpt_dir> -- cmd...
(job 6 ran it without the 40 s estimate for the classical units, added for job 7.)"""
import os, subprocess, sys, time, signal
budget, est, ckdir = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
cmd = sys.argv[sys.argv.index("--") + 1:]
def steps():
  try:
    return {d for d in os.listdir(ckdir) if d.isdigit()}
  except FileNotFoundError:
    return set()
t0 = time.time(); seen = steps()
p = subprocess.Popen(cmd)
while p.poll() is None:
  time.sleep(2)
  el = time.time() - t0
  now = steps()
  if now - seen:
    print(f"[watch] {el:.0f}s: new checkpoint(s) {sorted(now - seen)}", flush=True)
    seen = now
    e = est if max(int(x) for x in now) < 4 else 40  # the classical units are short
    if el + e > budget:
      time.sleep(8)  # let the save finish
      print(f"[watch] {time.time()-t0:.0f}s: next unit (~{est:.0f}s) would not fit; stopping", flush=True)
      p.send_signal(signal.SIGINT); 
      try: p.wait(20)
      except subprocess.TimeoutExpired: p.kill(); p.wait()
      sys.exit(99)
  if el > budget:
    print(f"[watch] {el:.0f}s: budget over; killing mid-unit", flush=True)
    p.kill(); p.wait(); sys.exit(124)
print(f"[watch] exit {p.returncode} at {time.time()-t0:.0f}s", flush=True)
sys.exit(p.returncode)
