#!/usr/bin/env bash
# What a device call needs and the H200 image lacks, made here (run from the course root, once per
# checkout; both folders are git-ignored):
#   .gpu/wheels  the grading stack's wheels for the image's Python 3.12 (nbgrader, nbclient, ipykernel,
#                jupytext...), minus what the image has already (numpy, jinja2, pyyaml, requests...) and
#                what grading never imports (JupyterLab, the notebook server's front ends): 64 MiB carry limit
#   .gpu/bwrap   Debian's bubblewrap with its libraries and loader (bin/bwrap runs it through the loader)
# On the device: pip install --no-index --no-deps --target /tmp/site .gpu/wheels/*.whl, then
# PYTHONPATH=/tmp/site:$PWD/src PATH=$PWD/.gpu/bwrap/bin:/tmp/site/bin:$PATH (benchmarks/grading_scale_gpu.sh).
set -eu
mkdir -p .gpu/wheels .gpu/bwrap/bin .gpu/bwrap/lib
pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  --platform linux_x86_64 --platform any -d .gpu/wheels \
  "nbgrader==0.9.6" nbclient nbformat ipykernel jupyter_client "ipywidgets>=8" jupytext 2>&1 | grep -v "^WARNING: Location" || true
# on the image already, or never imported while grading
for name in jupyterlab jupyterlab_server jupyter_builder notebook notebook_shim babel json5 jupyter_lsp async_lru \
    widgetsnbextension pygments jinja2 markupsafe pyyaml packaging python_dateutil six attrs certifi \
    idna urllib3 requests charset_normalizer psutil setuptools typing_extensions anyio h11 httpx httpcore \
    prometheus_client markdown_it_py mdurl; do
  rm -f .gpu/wheels/"$name"-[0-9]*.whl
done
bwrap=$(command -v bwrap) || { echo "install Debian's bubblewrap first (make sandbox)"; exit 1; }
cp "$bwrap" .gpu/bwrap/lib/bwrap.bin
for lib in $(ldd "$bwrap" | awk '/=>/ {print $3} /ld-linux/ {print $1}'); do cp -L "$lib" .gpu/bwrap/lib/; done
cat > .gpu/bwrap/bin/bwrap <<'SH'
#!/bin/sh
d=$(dirname "$(readlink -f "$0")")/../lib
exec "$d/ld-linux-x86-64.so.2" --library-path "$d" "$d/bwrap.bin" "$@"
SH
chmod +x .gpu/bwrap/bin/bwrap
du -sh .gpu/wheels .gpu/bwrap
