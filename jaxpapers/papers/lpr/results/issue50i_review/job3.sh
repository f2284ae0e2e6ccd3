#!/bin/bash
# cheap items first, then the deep4 continuation (resumes) + bootstrap, cut at 17:49
cd /work/main; export PYTHONPATH=/work/main
ARG=parts=main,kinds=ae+vae+dae+memae,code_select=true,select_archs=deep,select_extend=false,latent=64,select_steps=1600,datasets=local+global+dependency+clustered
echo "== ae_only_boot $(date -u +%T)"
timeout 60 python /tmp/lpr50i/ae_only_boot.py /tmp/lpr50i/deep4 $ARG /tmp/lpr50i/deep4_ae_only_boot.json
echo "== variance_pca $(date -u +%T)"
/usr/bin/time -f "%e s wall" timeout 150 python /tmp/lpr50i/variance_pca.py /tmp/lpr50i/variance_pca.json
echo "== one_set_claims $(date -u +%T)"
timeout 60 python /tmp/lpr50i/one_set_claims.py /tmp/lpr50i/one_set_claims.json
echo "== lpr_len $(date -u +%T)"
/usr/bin/time -f "%e s wall" timeout 70 python /tmp/lpr50i/lpr_len.py satimage2+ionosphere ae /tmp/lpr50i/lpr_len_main.json
echo "== deep4 resume $(date -u +%T)"
T=$(( $(date -u -d "17:49:00" +%s) - $(date -u +%s) ))
/usr/bin/time -f "%e s wall %U s user" timeout $T python launch/study.py --config=configs/lpr.py:$ARG --workdir=/tmp/lpr50i/deep4
echo "rc=$? $(date -u +%T)"
if [ -f /tmp/lpr50i/deep4/scores/memae.npz ]; then
  /usr/bin/time -f "%e s wall" timeout 60 python -m jaxpapers.papers.lpr.paired_bootstrap /tmp/lpr50i/deep4 $ARG /tmp/lpr50i/deep4/paired.json
  echo "boot rc=$? $(date -u +%T)"
fi
