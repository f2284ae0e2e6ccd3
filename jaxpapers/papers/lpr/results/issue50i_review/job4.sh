#!/bin/bash
cd /work/main; export PYTHONPATH=/work/main
echo "== one_set_claims (fractions) $(date -u +%T)"
timeout 60 python /tmp/lpr50i/one_set_claims.py /tmp/lpr50i/one_set_claims.json
bash /tmp/lpr50i/job_deep400.sh
