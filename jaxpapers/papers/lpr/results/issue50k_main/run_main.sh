#!/bin/bash
cd /work/main; date -u +%T; git rev-parse --short HEAD
export PYTHONPATH=.
export JAX_COMPILATION_CACHE_DIR=/tmp/lpr50k/jaxcache
/usr/bin/time -f "chunk wall %e s cpu %U+%S s" timeout ${T:-580} python launch/study.py --config=configs/lpr.py:parts=main,kinds=ae+vae+dae+memae,code_select=true,latent=64,select_steps=1600 --workdir=/tmp/lpr50j/main
echo "rc $? $(date -u +%T)"
