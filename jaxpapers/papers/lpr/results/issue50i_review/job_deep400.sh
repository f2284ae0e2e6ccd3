#!/bin/bash
# item 1 reference: the same four sets and rule at the fifth pass's fixed 400 steps, lr 1e-3 (capacity/code stage reused from deep4)
cd /work/main; export PYTHONPATH=/work/main
ARG=parts=main,kinds=ae+vae+dae+memae,code_select=true,select_archs=deep,select_extend=false,latent=64,datasets=local+global+dependency+clustered
mkdir -p /tmp/lpr50i/deep4_400
[ -f /tmp/lpr50i/deep4_400/code_selection_partial.json ] || cp /tmp/lpr50i/deep4/code_selection_partial.json /tmp/lpr50i/deep4_400/
echo "== deep4_400 start $(date -u +%T)"
/usr/bin/time -f "%e s wall %U s user" timeout $(( $(date -u -d "17:49:00" +%s) - $(date -u +%s) )) python launch/study.py --config=configs/lpr.py:$ARG --workdir=/tmp/lpr50i/deep4_400
echo "rc=$? $(date -u +%T)"
if [ -f /tmp/lpr50i/deep4_400/scores/memae.npz ]; then
  /usr/bin/time -f "%e s wall" python -m jaxpapers.papers.lpr.paired_bootstrap /tmp/lpr50i/deep4_400 $ARG /tmp/lpr50i/deep4_400/paired.json
  echo "boot rc=$? $(date -u +%T)"
fi
