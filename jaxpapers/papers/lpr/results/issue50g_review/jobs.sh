#!/bin/bash
# Issue 50, seventh pass: the review's smallest checks, rerun (workdirs under $W).
#   bash jaxpapers/papers/lpr/results/issue50g_review/jobs.sh {checks|trivial|steps|curves KINDS}
set -u
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH=$PWD
W=${W:-/tmp/h50g}; R=jaxpapers/papers/lpr/results/issue50g_review; mkdir -p $W
train() {  # name, config arg
  rm -rf $W/$1
  local t0=$SECONDS
  python launch/train.py --config=configs/lpr.py:$2 --workdir=$W/$1 > $W/$1.log 2>&1
  echo "$1 rc=$? $((SECONDS - t0)) s" | tee -a $W/$1.log
  python -m jaxpapers.papers.lpr.paired_bootstrap $W/$1 "$2" $W/$1/paired.json > $W/$1/paired.log 2>&1
  echo "$1 paired rc=$?"
}
case $1 in
checks)
  python $R/trivial.py $W/trivial.json > $W/trivial.log 2>&1; echo trivial rc=$?
  python $R/textbook.py wbc+wine+optdigits+pima+glass+satellite+breastw $W/textbook.json > $W/textbook.log 2>&1; echo textbook rc=$?
  C="datasets=optdigits,kinds=ae,code_select=true,latent=64,classical=pca_recon+hbos"
  train opt_400 "$C,steps=400"
  train opt_minmax "$C,scaling=minmax"
  train opt_1600 "$C,steps=1600" ;;
trivial)  # seconds; on the sixth pass's saved test scores
  python $R/trivial_paired.py ${MAIN:-/tmp/h50f/main} $W/trivial_paired.json > $W/trivial_paired.log 2>&1; echo trivial_paired rc=$? ;;
steps)
  C="datasets=satellite+ionosphere+wbc,kinds=ae,code_select=true,latent=64,classical=pca_recon"
  train si_400 "$C,steps=400"
  train si_1600 "$C,steps=1600" ;;
curves)
  t0=$SECONDS
  python $R/curves.py optdigits+wbc+satellite+ionosphere $2 1600 $W/curves_$2.json > $W/curves_$2.log 2>&1
  echo "curves $2 rc=$? $((SECONDS - t0)) s" | tee -a $W/curves_$2.log ;;
esac
