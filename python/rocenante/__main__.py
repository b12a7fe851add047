"""python -m rocenante: facts about this installation, for shell scripts.

    python -m rocenante --nccl-library    the path of librocenante_nccl.so, the NCCL-API layer installed with this
                                          package (docs/nccl.md): LD_PRELOAD=$(python -m rocenante --nccl-library)
                                          or VLLM_NCCL_SO_PATH=... Exits 1, saying why, when this build has none.
"""

from __future__ import annotations

import argparse
import os
import sys

NCCL_LIBRARY_NAME = "librocenante_nccl.so"


def nccl_library_path() -> str:
    """The installed layer's path, or "" when this build has none (built without nvcc or without nccl.h)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, NCCL_LIBRARY_NAME)
    return path if os.path.isfile(path) else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rocenante", description="Facts about this rocenante installation.")
    parser.add_argument("--nccl-library", action="store_true",
                        help="print the path of librocenante_nccl.so (NCCL's C ABI over RoCEnante; docs/nccl.md)")
    args = parser.parse_args(argv)
    if not args.nccl_library:
        parser.print_help()
        return 0
    path = nccl_library_path()
    if not path:
        print("rocenante: this build has no librocenante_nccl.so: the NCCL-API layer is built with nvcc and nccl.h "
              "(pip install . -Csetup-args=-Dcuda=enabled, with nccl.h in CUDA's include folder or "
              "-Csetup-args=-Dextra_include=DIR)", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
