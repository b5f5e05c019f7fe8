#!/usr/bin/python3
"""Run the command given (a test) only where a GPU answers: exit 77 (ctest's
SKIP_RETURN_CODE for the `gpu` label) with the reason otherwise.

    tests/tools/if_gpu.py /usr/bin/python3 tests/integration/test_e2e.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import psb  # noqa: E402

if len(sys.argv) < 2:
    sys.exit("usage: if_gpu.py COMMAND [ARG...]")
if psb.gpu_count() == 0:
    print("skipped: no GPU answers here (no CUDA runtime, or cudaGetDeviceCount found none)")
    sys.exit(77)
os.execv(sys.argv[1], sys.argv[1:])
