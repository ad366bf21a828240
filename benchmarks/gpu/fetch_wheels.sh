#!/usr/bin/env sh
# Download benchmarks/gpu/wheels.txt as CPython 3.12 x86-64 wheels into .whl/ (run from the repo root,
# on a machine with a package index; .whl/ is git-ignored and travels with the device call's carry).
set -e
PY=${PYTHON:-.venv/bin/python}
mkdir -p .whl
sed 's/#.*//' benchmarks/gpu/wheels.txt | while read -r pkg; do
  [ -n "$pkg" ] || continue
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 \
    -d .whl "$pkg"
done
du -sh .whl
