# (run from a copy of the tree at .stage/scale, carrying .gpu/wheels .gpu/wheels-grade; CC=ccwrap logs gcc calls)
set -u
ROOT=$(cd ../.. && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$ROOT"/.gpu/wheels/*.whl "$ROOT"/.gpu/wheels-grade/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 CC=$PWD/ccwrap
run() { # mode
  export TRITON_CACHE_DIR=/tmp/tc-$1 CCLOG=/tmp/cc-$1.log; : > $CCLOG
  /usr/bin/time -f "$1: wall=%e user=%U sys=%S" python3 probe_cache.py 2>&1 | tail -4
  echo "$1: gcc calls $(wc -l < $CCLOG); cache dirs $(ls $TRITON_CACHE_DIR | wc -l)"
}
run fresh
mkdir -p /tmp/tc-hostonly; for d in /tmp/tc-fresh/*/; do ls $d*.so >/dev/null 2>&1 && cp -r $d /tmp/tc-hostonly/; done
run hostonly
cp -r /tmp/tc-fresh /tmp/tc-full; run full
