set -u
ROOT=$(cd ../.. && pwd)
t=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site \
    "$ROOT"/.gpu/wheels/*.whl "$ROOT"/.gpu/wheels-grade/*.whl 2>&1 | tail -2
echo "install with byte code: $(( $(date +%s) - t )) s"
export PYTHONPATH=/tmp/site:$PWD/src PATH=$ROOT/.gpu/bwrap/bin:/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p $OUT/r
{ python3 -c "import torch, os, IPython; d=os.path.dirname(torch.__file__); print('torch at', d, 'pyc:', os.path.exists(os.path.join(d,'__pycache__')), 'writable:', os.access(d, os.W_OK)); print('IPython pyc:', os.path.exists(os.path.join(os.path.dirname(IPython.__file__),'__pycache__')))"
  for i in 1 2; do /usr/bin/time -f "import torch (no byte code writes): wall=%e user=%U sys=%S" env PYTHONDONTWRITEBYTECODE=1 python3 -c "import torch"; done
  for i in 1 2; do /usr/bin/time -f "import ipykernel.kernelapp, torch: wall=%e user=%U sys=%S" env PYTHONDONTWRITEBYTECODE=1 python3 -c "import ipykernel.kernelapp, torch"; done
  env PYTHONDONTWRITEBYTECODE=1 python3 -X importtime -c "import torch" 2>&1 | sort -t'|' -k2 -n | tail -8
} > $OUT/r/imports.txt 2>&1
cat $OUT/r/imports.txt
SKIP_INSTALL=1 OUT=$OUT DEADLINE=${DEADLINE:-540} CLASS=${CLASS:-48} PLAN="${PLAN}" bash benchmarks/grading_scale_gpu.sh
