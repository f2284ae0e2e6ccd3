#!/bin/bash
cd /work/main; export PYTHONPATH=/work/main
echo "== boot start $(date -u +%T)"
/usr/bin/time -f "%e s wall" python -m jaxpapers.papers.lpr.paired_bootstrap /tmp/lpr50j/main parts=main,kinds=ae+vae+dae+memae,code_select=true,latent=64,select_steps=1600 /tmp/lpr50j/main/paired.json
echo "boot rc=$? $(date -u +%T)"
T=480 /tmp/lpr50k/job_deep.sh
