#!/bin/bash
# usage: run_main2.sh <budget_s> <unit_est_s>
cd /work/main; date -u +%T; git rev-parse --short HEAD
export PYTHONPATH=.
export JAX_COMPILATION_CACHE_DIR=/tmp/lpr50k/jaxcache
/usr/bin/time -f "chunk wall %e s cpu %U+%S s" python /tmp/lpr50k/watch.py $1 $2 /tmp/lpr50j/main/checkpoints -- python launch/study.py --config=configs/lpr.py:parts=main,kinds=ae+vae+dae+memae,code_select=true,latent=64,select_steps=1600 --workdir=/tmp/lpr50j/main
echo "rc $? $(date -u +%T)"
