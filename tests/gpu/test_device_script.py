"""scripts/gpu.py, the device calls' runner: a library carried compressed (X.so.xz) is unpacked once
beside itself, for the suites (--lib) and for the benchmarks' --lib NAME:PATH options."""
import importlib.util
import lzma
import os
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu.py"
spec = importlib.util.spec_from_file_location("device_script", SCRIPT)
gpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu)


def test_compressed_library_unpacked_once(tmp_path):
    packed = tmp_path / "m.so.xz"
    packed.write_bytes(lzma.compress(b"first"))
    assert gpu.unpacked(str(packed)) == str(tmp_path / "m.so")
    assert (tmp_path / "m.so").read_bytes() == b"first"
    # Not unpacked again while the .xz is older than the library beside it ...
    (tmp_path / "m.so").write_bytes(b"kept")
    os.utime(packed, (1, 1))
    gpu.unpacked(str(packed))
    assert (tmp_path / "m.so").read_bytes() == b"kept"
    # ... and again when it is newer (another build carried under the same name).
    packed.write_bytes(lzma.compress(b"second"))
    os.utime(tmp_path / "m.so", (1, 1))
    gpu.unpacked(str(packed))
    assert (tmp_path / "m.so").read_bytes() == b"second"
    assert gpu.library_env(str(packed))["FLASHATTN_LIBRARY"] == str((tmp_path / "m.so").resolve())


def test_bench_lib_options_unpacked(tmp_path):
    (tmp_path / "y.so.xz").write_bytes(lzma.compress(b"y"))
    plain = str(tmp_path / "z.so")
    options = ["bench.py", "--lib", f"y:{tmp_path}/y.so.xz", f"--lib=w:{tmp_path}/y.so.xz", "--hdims", "128",
               "--lib", f"z:{plain}"]
    assert gpu.unpacked_lib_options(options) == ["bench.py", "--lib", f"y:{tmp_path}/y.so", f"--lib=w:{tmp_path}/y.so",
                                                 "--hdims", "128", "--lib", f"z:{plain}"]
    assert (tmp_path / "y.so").read_bytes() == b"y"
