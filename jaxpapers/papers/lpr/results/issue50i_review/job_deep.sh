#!/bin/bash
# item 1: deep-only rule on the four synthetic sets (all 30 wide), steps/rate by the rule; resumable
cd /work/main; export PYTHONPATH=/work/main
ARG=parts=main,kinds=ae+vae+dae+memae,code_select=true,select_archs=deep,select_extend=false,latent=64,select_steps=1600,datasets=local+global+dependency+clustered
echo "== deep4 start $(date -u +%T) HEAD $(git rev-parse --short HEAD)"
/usr/bin/time -f "%e s wall %U s user" timeout 560 python launch/study.py --config=configs/lpr.py:$ARG --workdir=/tmp/lpr50i/deep4
echo "rc=$? $(date -u +%T)"
if [ -f /tmp/lpr50i/deep4/claims.json ] && [ -f /tmp/lpr50i/deep4/scores/memae.npz ]; then
  /usr/bin/time -f "%e s wall" python -m jaxpapers.papers.lpr.paired_bootstrap /tmp/lpr50i/deep4 $ARG /tmp/lpr50i/deep4/paired.json
  echo "boot rc=$? $(date -u +%T)"
fi
