#!/usr/bin/env bash
# Mutation testing of one core module against its own test files, with cosmic-ray
# (docs/mutation-testing.md). Not part of CI: a full run takes long on a small machine.
#   bash tools/mutation/run.sh MODULE [SAMPLE [SEED]]
# MODULE: cuda_runtime, registry, checks, endstate, mooncake_checks, session, causes, contract,
# teardown_once, rules (a config tools/mutation/MODULE.toml); SAMPLE mutants drawn with SEED (default
# 18) in file order, so a seed names the same sample of the same version of the module on any
# machine.
# cosmic-ray mutates the module's file in place and restores it after each mutant: run it on a
# clean checkout, and after an interrupted run `git checkout -- <module file>`.
set -euo pipefail
cd "$(dirname "$0")/../.."
module=${1:?usage: tools/mutation/run.sh MODULE [SAMPLE [SEED]]}
sample=${2:-}
seed=${3:-18}
cfg=tools/mutation/$module.toml
if [ ! -f "$cfg" ]; then
    echo "tools/mutation/run.sh: no config $cfg; modules: $(cd tools/mutation && ls ./*.toml \
| sed 's#./##; s#.toml##' | tr '\n' ' ')" >&2
    exit 2
fi
path=$(sed -n 's/^module-path = "\(.*\)"/\1/p' "$cfg")
if ! git diff --quiet -- "$path"; then
    echo "tools/mutation/run.sh: $path has uncommitted changes; commit or stash them first" >&2
    exit 2
fi
db=${MUTATION_DB:-mutation-$module.sqlite}
rm -f "$db"
cosmic-ray init "$cfg" "$db"
cr-filter-operators "$db" "$cfg"
if [ -n "$sample" ]; then
    python tools/mutation/sample.py "$db" "$sample" --seed "$seed"
fi
cosmic-ray baseline "$cfg"
cosmic-ray exec "$cfg" "$db"
cr-report --surviving-only --show-diff "$db"
python tools/mutation/score.py "$db" --list
