#!/bin/bash
# the README's deep-only positive control, all four kinds; the selection resumed from the AE-only run's partial file (same key: the selection does not depend on the other kinds)
cd /work/main; export PYTHONPATH=/work/main
export JAX_COMPILATION_CACHE_DIR=/tmp/lpr50k/jaxcache
ARG=parts=main,kinds=ae+vae+dae+memae,code_select=true,select_archs=deep,select_extend=false,latent=64,select_steps=1600,datasets=local+global+dependency+clustered
echo "== deep4all start $(date -u +%T) HEAD $(git rev-parse --short HEAD)"
/usr/bin/time -f "%e s wall %U s user" timeout 570 python launch/study.py --config=configs/lpr.py:$ARG --workdir=/tmp/lpr50k/deep4all
echo "rc=$? $(date -u +%T)"
if [ -f /tmp/lpr50k/deep4all/claims.json ] && [ -f /tmp/lpr50k/deep4all/scores/memae.npz ]; then
  /usr/bin/time -f "%e s wall" python -m jaxpapers.papers.lpr.paired_bootstrap /tmp/lpr50k/deep4all $ARG /tmp/lpr50k/deep4all/paired.json
  echo "boot rc=$? $(date -u +%T)"
fi
