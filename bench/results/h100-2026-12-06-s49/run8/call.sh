# The command of run8 as it ran (run tool, carry .after-s49: m.so.xz, sink_ab.py, kept here), one line.
# sink_ab_forward_first.txt: the same script's first form (forward only), run just before.
B=.after-s49; python3 -c "import lzma,pathlib;pathlib.Path('$B/m.so').write_bytes(lzma.decompress(pathlib.Path('$B/m.so.xz').read_bytes()))"; nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt; FLASHATTN_LIBRARY=$PWD/$B/m.so timeout 200 python3 $B/sink_ab.py | tee $OUT/sink_ab.txt
