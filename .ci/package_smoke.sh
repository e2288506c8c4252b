#!/usr/bin/env bash
# Release check (issue 21, item 7): build the wheel and sdist, install each into a fresh venv and run the
# installed `interp` on a tiny random model. Needs only PyPI (torch's CPU wheel comes from pip's cache after
# the first run). Usage: .ci/package_smoke.sh [PYTHON]   (default: python3)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-python3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
LOCK=requirements.lock
TORCH="torch==2.13.0"

start=$(date +%s)
"$PY" -m venv "$WORK/build-venv"
"$WORK/build-venv/bin/pip" install -q --upgrade pip build
"$WORK/build-venv/bin/python" -m build --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; exit 1; }
ls -l "$WORK/dist"

# The wheel must carry the package data: the fused kernel's C++ source.
"$WORK/build-venv/bin/python" - "$WORK/dist" <<'PY'
import sys, zipfile, pathlib
whl = next(pathlib.Path(sys.argv[1]).glob("interp-*.whl"))
names = set(zipfile.ZipFile(whl).namelist())
need = ["interp/engine/kernels/stream_attention.cpp", "interp/report/assets/report.css", "interp/report/assets/viewer.js", "interp/__init__.py", "interp/cli/__init__.py", "interp/cli/scan.py", "interp/docs/numbers.py"]
missing = [n for n in need if n not in names]
if missing:
    sys.exit(f"wheel {whl.name} lacks {missing}")
print(f"{whl.name}: {len(names)} files, package data present")
PY

# The sdist must carry the sources and the kernel too (pip builds the wheel from it where no wheel fits).
sdist_files="$(tar -tzf "$WORK"/dist/interp-*.tar.gz)"   # listed first: grep -q would end the pipe early (pipefail)
grep -q "interp/engine/kernels/stream_attention.cpp" <<<"$sdist_files" \
    || { echo "sdist lacks interp/engine/kernels/stream_attention.cpp"; exit 1; }

venv="$WORK/venv"
"$PY" -m venv "$venv"
# CPU torch first (the Makefile's pin; pip's cache or find-links keep it local), so no dependency pulls a CUDA
# build; the lock pins the rest.
"$venv/bin/pip" install -q -c "$LOCK" "$TORCH"
"$venv/bin/pip" install -q -c "$LOCK" "$WORK"/dist/interp-*.whl
out="$WORK/out"
# Run from outside the source tree, so the installed package (not ./interp) is what runs.
(cd "$WORK" && "$venv/bin/python" -c "import interp, importlib.metadata as m; assert interp.__version__ == m.version('interp'), interp.__version__; print('interp', interp.__version__, 'from', interp.__file__)")
(cd "$WORK" && "$venv/bin/interp" scan tiny-llama --prompts 1 --tokens 32 --out "$out")
for f in heads.csv report.html; do
    test -s "$out/$f" || { echo "package smoke: $out/$f missing"; exit 1; }
done
echo "package smoke: done in $(( $(date +%s) - start )) s"
