#!/bin/bash
# Run here (no GPU), from the repository root on main, before next.sh's device call (about 30
# minutes on two cores): builds the libraries next.sh carries into .s69 (gitignored), compressed:
#   main.so.xz  main's tree, every head dim, sm_90 (also rec.sh's library);
#   hc.so.xz    main + hc.patch (bwd-d256-half-counts), d256, sm_90;
#   red.so.xz   main + red.patch (bwd-dkv-red-scalar), d256, sm_90;
#   st.so.xz    main + red.patch + st.patch (bwd-dkv-staged-tma, on red), d256, sm_90;
# with each one's commit in NAME.commit. `build.sh hc red` builds only those; the patches apply to
# main at the commit they were made on (git am) or later where their files are unchanged.
set -euo pipefail
root=$(pwd); D=.s69; here=bench/results/cpu-2026-12-08-s69
mkdir -p $D
bash scripts/fetch_cutlass.sh
build() { # NAME SOURCE HEADDIMS [PATCH]
    local b=$root/build-s69-$1
    mkdir -p $b
    rm -f $b/CMakeCache.txt # (a patched tree is a new temporary folder each time)
    { cmake -S "$2" -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS=90 \
        "-DFLASHATTN_HEADDIMS=$3" -DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_BUILD_TOOLS=OFF \
        -DFLASHATTN_BUILD_EXAMPLES=OFF -DFLASHATTN_CUDA_VERBOSE_PTXAS=ON && ninja -C $b; } > $b/build.log 2>&1 ||
        { echo "$1: the build failed, see $b/build.log"; exit 1; }
    if grep -q "C75" $b/build.log; then echo "$1: ptxas serialised wgmma (C75xx), see $b/build.log"; exit 1; fi
    xz -T2 -c $b/src/libflashattn.so > $D/$1.so.xz
    echo "$(git -C "$root" rev-parse HEAD)${4:+ + $4}" > $D/$1.commit
    echo "$1: $D/$1.so.xz ($(cat $D/$1.commit))"
}
wt=""
drop_worktree() { [ -z "$wt" ] || git worktree remove --force "$wt" 2>/dev/null || { rm -rf "$wt"; git worktree prune; }; }
trap drop_worktree EXIT # (also where a build fails)
for name in ${@:-main hc red st}; do
    if [ "$name" = main ]; then build main "$root" "32;64;96;128;192;256"; continue; fi
    wt=$(mktemp -d)
    git worktree add -q --detach "$wt" HEAD
    mkdir -p "$wt/third_party" && ln -s "$root/third_party/cutlass" "$wt/third_party/cutlass"
    patches=$name.patch
    [ "$name" = st ] && patches="red.patch st.patch" # st is built on red
    for p in $patches; do (cd "$wt" && git -c user.name=s69 -c user.email=s69@localhost am -q "$root/$here/$p"); done
    build $name "$wt" 256 "${patches// / + }"
    drop_worktree
    wt=""
done
