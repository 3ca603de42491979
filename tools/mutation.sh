#!/usr/bin/env bash
# Mutation testing of the modelling core (btacalc/model/*) with mutmut: every mutant must make some
# test fail. Usage: tools/mutation.sh [extra mutmut args]. Takes about 3 hours on 2 cores (5,351 mutants); an interrupted run resumes by calling `mutmut run` again (this script starts afresh).
#
# mutmut runs the tests in-process against a copy of the package under mutants/, so btacalc must NOT
# be installed in the interpreter it uses (an installed/editable btacalc would shadow the mutants).
# This script makes a throwaway venv with btacalc's dependencies only.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${MUTATION_VENV:-$(mktemp -d)/venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# every run: the dependencies may have grown since the venv was made (a no-op when they are there)
reqs=$(mktemp)
python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml","rb"))["project"]["dependencies"]))' > "$reqs"
"$venv/bin/pip" install -q "mutmut>=3.8" mypy pytest pytest-benchmark hypothesis jsonschema matplotlib pyyaml -r "$reqs"
rm -rf mutants && mkdir mutants  # exists before python starts, so PYTHONPATH keeps it
PATH="$venv/bin:$PATH" PYTHONPATH="$PWD/mutants" "$venv/bin/mutmut" run --max-children "${MUTATION_JOBS:-2}" "$@" >/dev/null 2>&1 || true
"$venv/bin/mutmut" results --all true 2>/dev/null | python3 tools/mutation_score.py
