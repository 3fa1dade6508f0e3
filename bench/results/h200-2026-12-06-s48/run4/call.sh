# The command of run4 as it ran (run tool, carry .after-s48/m.so.xz, m.commit), one line:
B=.after-s48; export FLASHATTN_COMMIT=$(cat $B/m.commit); python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/m.so --timeout 125 -- --rounds 1 | tail -3; cd $OUT && tar czf b.tgz b && rm -rf b
