"""`tilec explain` (CLI and Python API): every stage is inspectable."""

from __future__ import annotations

import os
import subprocess
import sys

import llvmlite.binding as llvm
import pytest

import tilec
import tilec.cli

MATMUL = "C[i,j:M,N] = +(A[i,k]*B[k,j])"
MATMUL_FN = "function (A[M, L], B[L, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[k, j]); }"
SHAPES = ["--shape", "A=64x32", "--shape", "B=32x16"]
SOFTMAX = (
    "function (X[N, C]) -> (O) { M[i, 0: N, 1] = >(X[i, j]); E = exp(X - M);"
    " S[i, 0: N, 1] = +(E[i, j]); O = E / S; }"
)


def run_cli(capsys, *argv):
    """Run tilec.cli.main; argparse-style SystemExit counts as a return code."""
    try:
        rc = tilec.cli.main(list(argv))
    except SystemExit as e:  # e.g. argparse usage errors
        rc = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return rc, out, err


def parse_llvm(text: str):
    mod = llvm.parse_assembly(text)
    mod.verify()
    return mod


def lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def test_explain_stage_llvm_is_parseable_ir(capsys):
    rc, out, err = run_cli(capsys, "explain", MATMUL, *SHAPES, "--stage", "llvm")
    assert rc == 0, err
    mod = parse_llvm(out)
    assert any(not f.is_declaration for f in mod.functions), "no function defined in the IR"


def test_explain_stage_tensor(capsys):
    rc, out, err = run_cli(capsys, "explain", MATMUL, *SHAPES, "--stage", "tensor")
    assert rc == 0, err
    assert out.strip()
    for name in ("A", "B", "C"):
        assert name in out
    assert "define " not in out  # not LLVM IR


def test_explain_stage_loop(capsys):
    rc, out, err = run_cli(capsys, "explain", MATMUL, *SHAPES, "--stage", "loop")
    assert rc == 0, err
    assert "for" in out.lower()
    assert "64" in out and "16" in out  # concrete extents from the shapes
    assert "define " not in out


def test_explain_all_stages_by_default(capsys):
    rc, full, err = run_cli(capsys, "explain", MATMUL, *SHAPES)
    assert rc == 0, err
    _, tensor, _ = run_cli(capsys, "explain", MATMUL, *SHAPES, "--stage", "tensor")
    _, loop, _ = run_cli(capsys, "explain", MATMUL, *SHAPES, "--stage", "loop")
    full_lines = set(lines(full))
    missing_tensor = [ln for ln in lines(tensor) if ln not in full_lines]
    missing_loop = [ln for ln in lines(loop) if ln not in full_lines]
    assert not missing_tensor, f"tensor stage lines missing from full output: {missing_tensor[:5]}"
    assert not missing_loop, f"loop stage lines missing from full output: {missing_loop[:5]}"
    assert "define" in full  # the LLVM IR is printed too
    assert len(full) > len(tensor) + len(loop)


def test_explain_function_form_program(capsys):
    rc, out, err = run_cli(capsys, "explain", SOFTMAX, "--shape", "X=4x8", "--stage", "llvm")
    assert rc == 0, err
    parse_llvm(out)


def test_explain_syntax_error_exits_nonzero_without_traceback(capsys):
    rc, out, err = run_cli(capsys, "explain", "C[i,j:M,N] = +(A[i,k]*B[k,j]", *SHAPES)
    assert rc != 0
    assert "Traceback" not in err and "Traceback" not in out
    assert "^" in err
    assert "define" not in out


def test_explain_semantic_error_names_culprit(capsys):
    src = "function (A[N]) -> (O) { O[i: N] = +(Bogus[i]); }"
    rc, out, err = run_cli(capsys, "explain", src, "--shape", "A=8")
    assert rc != 0
    assert "Bogus" in err
    assert "Traceback" not in err


def test_explain_shape_mismatch_exits_nonzero(capsys):
    rc, out, err = run_cli(capsys, "explain", MATMUL_FN, "--shape", "A=4x5", "--shape", "B=6x3")
    assert rc != 0
    assert err.strip()
    assert "Traceback" not in err


def test_explain_bad_shape_argument_exits_nonzero(capsys):
    rc, out, err = run_cli(capsys, "explain", MATMUL, "--shape", "A=64by32", "--shape", "B=32x16")
    assert rc != 0
    assert "Traceback" not in err


def test_cli_as_a_process():
    code = "import sys, tilec.cli; sys.exit(tilec.cli.main(sys.argv[1:]))"
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    ok = subprocess.run(
        [sys.executable, "-c", code, "explain", MATMUL, *SHAPES, "--stage", "llvm"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    parse_llvm(ok.stdout)
    bad = subprocess.run(
        [sys.executable, "-c", code, "explain", "C[i,j:M,N] = +(A[i,k]*B[k,j]", *SHAPES],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert bad.returncode != 0
    assert "Traceback" not in bad.stderr
    assert "^" in bad.stderr


# --------------------------------------------------------------------------- Python API

def test_explain_api_all_stages():
    text = tilec.explain(MATMUL, shapes={"A": (64, 32), "B": (32, 16)})
    assert isinstance(text, str)
    assert "define" in text
    assert "for" in text.lower()


@pytest.mark.parametrize("stage", ["tensor", "loop", "llvm"])
def test_explain_api_single_stage(stage):
    text = tilec.explain(MATMUL, shapes={"A": (64, 32), "B": (32, 16)}, stage=stage)
    assert isinstance(text, str) and text.strip()
    if stage == "llvm":
        parse_llvm(text)
    else:
        assert "define " not in text


def test_explain_api_needs_shapes_and_dtypes_by_name():
    f = tilec.compile(MATMUL)
    with pytest.raises(tilec.TilecError, match=r"shapes must map input names.*the inputs are A, B.*got a tuple"):
        f.explain(((64, 32), (32, 16)))
    with pytest.raises(tilec.TilecError, match=r"dtypes must map input names.*got a list"):
        f.explain({"A": (64, 32), "B": (32, 16)}, ["float32", "float32"])


def test_explain_api_dtypes():
    text = tilec.explain(
        MATMUL,
        shapes={"A": (8, 4), "B": (4, 2)},
        dtypes={"A": "float64", "B": "float64"},
        stage="llvm",
    )
    parse_llvm(text)
    assert "double" in text
    text32 = tilec.explain(MATMUL, shapes={"A": (8, 4), "B": (4, 2)}, stage="llvm")
    assert "float" in text32


def test_explain_api_keyword_sizes():
    text = tilec.explain(
        "function (A[L]) -> (O) { O[i: N] = =(A[i]); }", shapes={"A": (5,)}, N=8, stage="llvm"
    )
    parse_llvm(text)


def test_explain_api_errors_are_tilec_errors():
    with pytest.raises(tilec.TileSyntaxError):
        tilec.explain("O = A @ B", shapes={"A": (2,), "B": (2,)})
    with pytest.raises(tilec.SemanticError):
        tilec.explain("function (A[N]) -> (O) { O[i: N] = +(Bogus[i]); }", shapes={"A": (3,)})


# ------------------------------------------------------------------ tilec tune --backward


def test_tune_backward_tunes_the_gradient_kernels_the_torch_op_uses(capsys, tmp_path, monkeypatch):
    """A quick real `tilec tune conv2d --backward`: one JSON line per tuned kernel (the forward
    one, then the input and the weight gradient); the torch op's backward then compiles with
    those records and its gradients still match torch's."""
    import json

    import numpy as np
    import torch
    import torch.nn.functional as F

    from tilec.ops import sources
    from tilec.ops import torch_ops  # noqa: F401 - registers torch.ops.tilec
    from tilec.config import options

    records = tmp_path / "records.sqlite"
    shape = "N=2,C=8,H=7,W=9,CO=16,KH=3,KW=3,stride=1,pad=1"
    rc, out, err = run_cli(capsys, "tune", "conv2d", "--shape", shape, "--trials", "2", "--backward",
                           "--records", str(records), "--jobs", "1")
    assert rc == 0, err
    kernels = [json.loads(line) for line in out.splitlines()]
    assert len(kernels) == 3 and "backward" not in kernels[0]["label"]
    assert all("backward (gradient statement" in k["label"] and k["time_ms"] > 0 for k in kernels[1:])
    monkeypatch.setattr(options, "records_path", records)
    monkeypatch.setattr(options, "use_records", True)
    source = sources.conv2d_source((1, 1), (1, 1), (1, 1), False)
    grad = tilec.grad(source, ["X", "F"])
    sig = tilec.pipeline.Signature((("X", (2, 8, 7, 9)), ("F", (16, 8, 3, 3)), ("DO", (2, 16, 7, 9))),
                                 (("X", "float32"), ("F", "float32"), ("DO", "float32")), ())
    recorded = grad._recorded_schedule(sig)
    assert recorded is not None and len(recorded.configs) == 2
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.standard_normal((2, 8, 7, 9)), dtype=torch.float32, requires_grad=True)
    w = torch.tensor(rng.standard_normal((16, 8, 3, 3)), dtype=torch.float32, requires_grad=True)
    dy = torch.tensor(rng.standard_normal((2, 16, 7, 9)), dtype=torch.float32)
    got = torch.autograd.grad(torch.ops.tilec.conv2d(x, w, None, [1, 1], [1, 1], [1, 1], 1), (x, w), dy)
    want = torch.autograd.grad(F.conv2d(x, w, None, 1, 1), (x, w), dy)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


def test_explain_stage_templates_names_the_template_of_every_statement(capsys):
    """A one-line program longer than a file name can be is Tile text, not a path (it was an OSError)."""
    conv = ("function (X[N, C, H, W], F[CO, C, KH, KW]) -> (O) { I[n, h, w, c: N, H, W, C] = =(X[n, c, h, w]); "
            "K[i, j, c, co: KH, KW, C, CO] = =(F[co, c, i, j]); "
            "Y[n, x, y, co: N, H, W, CO] = +(I[n, x + i - 1, y + j - 1, c] * K[i, j, c, co]); "
            "O[n, co, x, y: N, CO, H, W] = =(Y[n, x, y, co]); }")
    assert len(conv) > 255
    rc, out, err = run_cli(capsys, "explain", conv, "--shape", "X=2x16x9x9", "--shape", "F=32x16x3x3",
                           "--stage", "templates")
    assert rc == 0, err
    lines = out.strip().splitlines()
    assert [line.split()[1] for line in lines] == ["folded_copy", "folded_copy", "implicit_gemm[direct]", "stored_copy"]  # the tiles land in O
    assert "mr=" in lines[2] and "nr=" in lines[2]


def test_every_backend_stage_is_a_stage_explain_accepts():
    """`explain --stage` offers STAGES: it must name each backend's printable stages and views, no more."""
    from tilec.pipeline import BACKENDS, STAGES

    printable = {name for backend in BACKENDS.values() for name in backend.stage_names()}
    assert set(STAGES) == printable and len(STAGES) == len(printable)


def test_tune_in_bfloat16_for_the_gpu_says_the_cuda_backend_has_none(capsys):
    rc, out, err = run_cli(capsys, "tune", "gemm", "--shape", "M=64,N=64,K=64", "--dtype", "bfloat16",
                           "--target", "cuda-sim", "--trials", "1")
    assert rc != 0 and "Traceback" not in err
    assert "bfloat16 tunes CPU kernels only" in err and "--target llvm" in err


def test_version_prints_the_package_version(capsys):
    rc, out, err = run_cli(capsys, "--version")
    assert rc == 0 and out.strip() == f"tilec {tilec.__version__}"


@pytest.mark.parametrize("word, hint", [("gemmm", "did you mean 'gemm'?"), ("conv", "did you mean 'conv2d'?"),
                                        ("mykernel", "")])
def test_tune_an_unknown_op_names_the_ops_it_knows(capsys, word, hint):
    rc, out, err = run_cli(capsys, "tune", word, "--trials", "1")
    assert rc != 0 and "Traceback" not in err
    assert f"unknown op '{word}'" in err and hint in err
    assert all(name in err for name in ("gemm", "conv2d", "attention", "model"))


def test_tune_a_file_with_a_malformed_shape_says_what_form_is_expected(capsys, tmp_path):
    path = tmp_path / "mm.tile"
    path.write_text("function (A[M, K], B[K, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[k, j]); }")
    rc, out, err = run_cli(capsys, "tune", str(path), "--shape", "bogus", "--trials", "1")
    assert rc != 0 and "Traceback" not in err
    assert "--shape" in err and "NAME=DIMS such as A=64x32" in err and "'bogus'" in err


def test_tune_progress_in_a_log_file_is_plain_lines(capsys, tmp_path):
    """stderr that is not a terminal (here captured; a log file) gets whole progress lines, every
    8 measurements and the last, with no carriage returns or escape sequences."""
    rc, out, err = run_cli(capsys, "tune", "gemm", "--shape", "M=48,N=48,K=48", "--trials", "9",
                           "--records", str(tmp_path / "records.sqlite"))
    assert rc == 0, err
    assert "\r" not in err and "\033" not in err
    progress = [line for line in err.splitlines() if line.startswith("tune gemm")]
    counts = [int(line.split(": ")[1].split("/")[0]) for line in progress]
    assert counts and counts == sorted(set(counts)) and counts[-1] == 9
    assert all(c % 8 == 0 or c == 9 for c in counts)


def test_tilec_tune_is_the_command_from_python(tmp_path, capsys):
    """`tilec.tune(op, shape, **options)` runs `tilec tune` and returns its summaries; options are the
    command's by name, a misspelt one is a TilecError listing them."""
    from tilec.records import RecordDB

    records = tmp_path / "records.sqlite"
    (summary,) = tilec.tune("gemm", "M=48,N=40,K=32", trials=3, records=str(records), seed=1)
    assert summary["label"] == "gemm M=48,N=40,K=32" and summary["time_ms"] > 0
    with RecordDB(records) as db:
        assert len([r for r in db.records(summary["task"]) if r.confirmed == 0]) == 3
    assert capsys.readouterr().err == ""  # no progress unless asked for
    with pytest.raises(tilec.TilecError, match="unknown option 'trails'.*trials"):
        tilec.tune("gemm", "M=48,N=40,K=32", trails=3)
    with pytest.raises(tilec.TilecError, match="unknown op 'gemmm'"):
        tilec.tune("gemmm")
