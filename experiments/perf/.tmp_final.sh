export OUT; . experiments/perf/device_env.sh
L=$PWD/build-cuda/dist/libsgdn_cuda_capi.so
for w in 8 4 8 4; do SGDN_CUDA_REC_WARPS=$w SGDN_CUDA_LIB=$L timeout 100 python3 experiments/perf/bench.py --out $OUT --name p$w --layouts 4x8K,2x16K --configs dense,sparse-default > $OUT/p$w.log 2>&1; grep "^|" $OUT/p$w.md | grep -v -e "---" -e layout | cut -d'|' -f2-7,11 | sed "s/^/w$w /"; done
SGDN_STEPS="all bench py" bash experiments/perf/device_bench.sh > $OUT/steps.txt 2>&1
grep -E "rc=|passed|failed|worst" $OUT/steps.txt; grep "^|" $OUT/h200.md | cut -d'|' -f2-7,11
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
