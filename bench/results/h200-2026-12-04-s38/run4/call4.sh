#!/bin/bash
# Session 38 call 4: main c06047f (the ordered dQ at d64, on d256's GQA walk, sections of 24 MB), every Hopper head
# dim (64;128;192;256): the backward grid (`bench backward -- --rounds 2`), then test_backward's deterministic and
# ordered cases.
export GPU_DEADLINE_AT=$(( $(date +%s) + 200 ))
B=.after-s38
export FLASHATTN_COMMIT=$(cat $B/commit.txt)
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/final.so'); p.write_bytes(lzma.decompress(pathlib.Path('$B/final.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/final.so -- --rounds 2 | tail -2
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/final.so --name bwd-final-det --timeout 60 -k "determin or ordered or race"
cat $OUT/t/summary.txt
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t b && rm -rf t b
