"""CUDA C -> cubin for one GPU architecture, with nvcc (or NVRTC where nvcc is missing).

Cubins are cached on disk (tilec.disk_cache) under a key hashing the source text,
the architecture, the compiler and its version, and the options. A compile failure raises
`CudaCompileError` carrying the compiler's message and a command that reproduces it (the
source is kept next to the cache for that). Requires nothing at import time: nvcc and
cuda-python are looked up on first use.
"""

from __future__ import annotations

import functools
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from tilec.config import options
from tilec.errors import CodegenError, TilecError
from tilec import disk_cache

_ARCH = re.compile(r"^sm_(\d+)a?$")
NVCC_OPTIONS = ("-std=c++17", "-O3")


class CudaCompileError(CodegenError):
    """nvcc or NVRTC rejected generated CUDA C (a tilec bug: the message holds the compiler's words)."""


def check_arch(arch: str) -> str:
    m = _ARCH.match(arch)
    if m is None or int(m.group(1)) < 70:
        raise TilecError(f"GPU architecture '{arch}' is not one tilec compiles for; "
                         "give 'sm_NN' with NN >= 70 (e.g. 'sm_80' for A100, 'sm_90' for H100)")
    return arch


@functools.cache
def nvcc_version() -> str | None:
    """nvcc's version line ('release 13.0, V13.0.88'), or None where nvcc is not on PATH."""
    exe = shutil.which("nvcc")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line for line in out.splitlines() if "release" in line]
    return lines[-1].strip() if lines else out.strip().splitlines()[-1]


def compile_cubin(source: str, arch: str) -> bytes:
    """The cubin of `source` for `arch` ('sm_90'), from the disk cache or a fresh compile."""
    check_arch(arch)
    version = nvcc_version()
    compiler = f"nvcc {version}" if version is not None else f"nvrtc {_nvrtc_version()}"
    key = hashlib.sha256("\0".join(["cubin", compiler, arch, *NVCC_OPTIONS, source]).encode()).hexdigest()
    cached = disk_cache.load(key)
    if cached is not None:
        return cached
    cubin = _nvcc(source, arch) if version is not None else _nvrtc(source, arch)
    disk_cache.store(key, cubin)
    return cubin


def _nvcc(source: str, arch: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="tilec-nvcc-") as tmp:
        src = Path(tmp) / "kernel.cu"
        out = Path(tmp) / "kernel.cubin"
        src.write_text(source)
        cmd = ["nvcc", "-cubin", f"-arch={arch}", *NVCC_OPTIONS, "-o", str(out), str(src)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as e:
            raise CudaCompileError(f"could not run nvcc: {e}") from None
        if proc.returncode != 0:
            kept = _keep_source(source)
            repro = " ".join(cmd[:-3] + ["-o", "kernel.cubin", str(kept) if kept else "kernel.cu"])
            raise CudaCompileError(f"nvcc failed for {arch} (exit {proc.returncode}):\n"
                                   f"{(proc.stderr or proc.stdout).strip()}\nreproduce with: {repro}")
        return out.read_bytes()


def _keep_source(source: str) -> Path | None:
    """Save a failing translation unit where the user can find it (None if there is no cache dir)."""
    if options.cache_dir is None:
        return None
    path = options.cache_dir / "failed" / f"{hashlib.sha256(source.encode()).hexdigest()[:16]}.cu"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    except OSError:
        return None
    return path


def _nvrtc_module():  # type: ignore[no-untyped-def]
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise TilecError("no CUDA compiler: nvcc is not on PATH and cuda-python's NVRTC is not installed; "
                         "install the CUDA toolkit, or `pip install tilec[nvrtc]`") from None
    return nvrtc


def _nvrtc_version() -> str:
    nvrtc = _nvrtc_module()
    err, major, minor = nvrtc.nvrtcVersion()
    _nvrtc_check(nvrtc, err, "nvrtcVersion")
    return f"{major}.{minor}"


def _nvrtc_check(nvrtc, err, what: str, log: str = "") -> None:  # type: ignore[no-untyped-def]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CudaCompileError(f"NVRTC {what} failed ({err}):\n{log}".rstrip())


def _nvrtc(source: str, arch: str) -> bytes:
    nvrtc = _nvrtc_module()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], [])
    _nvrtc_check(nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            _nvrtc_check(nvrtc, err, f"compile for {arch}", log.decode(errors="replace"))
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _nvrtc_check(nvrtc, err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _nvrtc_check(nvrtc, err, "nvrtcGetCUBIN")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
