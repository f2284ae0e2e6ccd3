#!/bin/bash
# the deep-only positive control on the four synthetic sets, AE only (AE+LPR its own pick); resumable
cd /work/main; export PYTHONPATH=/work/main
export JAX_COMPILATION_CACHE_DIR=/tmp/lpr50k/jaxcache
ARG=parts=main,kinds=ae,code_select=true,select_archs=deep,select_extend=false,latent=64,select_steps=1600,datasets=local+global+dependency+clustered
echo "== deep4 start $(date -u +%T) HEAD $(git rev-parse --short HEAD)"
/usr/bin/time -f "%e s wall %U s user" timeout ${T:-570} python launch/study.py --config=configs/lpr.py:$ARG --workdir=/tmp/lpr50k/deep4
echo "rc=$? $(date -u +%T)"
if [ -f /tmp/lpr50k/deep4/claims.json ] && [ -f /tmp/lpr50k/deep4/scores/ae.npz ]; then
  /usr/bin/time -f "%e s wall" python -m jaxpapers.papers.lpr.paired_bootstrap /tmp/lpr50k/deep4 $ARG /tmp/lpr50k/deep4/paired.json
  echo "boot rc=$? $(date -u +%T)"
fi
