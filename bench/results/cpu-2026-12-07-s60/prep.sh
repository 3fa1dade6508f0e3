#!/bin/bash
# Run here (no GPU), from the repository root on main, before the device call: packs what onbuild.sh
# needs into .after-s61 (gitignored; carry it): the CUTLASS headers (2.4 MB compressed, so the tree
# plus them stays far under the carry limit) and the files that dkv-sums-default.patch changes, as
# the branch has them. No local build: onbuild.sh builds both libraries on the device.
set -e
root=$(pwd); D=.after-s61; P=bench/results/cpu-2026-12-07-s60/dkv-sums-default.patch
mkdir -p $D
bash scripts/fetch_cutlass.sh
tar czf $D/cutlass.tgz third_party/cutlass
tmp=$(mktemp -d)
git worktree add -q --detach "$tmp" HEAD
(cd "$tmp" && git apply "$root/$P" && tar czf "$root/$D/y-src.tgz" $(git diff --name-only))
git worktree remove --force "$tmp"
git rev-parse HEAD > $D/m.commit
cp bench/results/cpu-2026-12-07-s60/onbuild.sh $D/
ls -la $D
