"""%gpu_doctor's report as the user gets it: as text, HTML and JSON, printed by the magic (which
unregisters cleanly); importing the doctor imports neither torch nor IPython nor pynvml."""

from __future__ import annotations

import json

import pytest
from support.doctor_facts import CPU_TORCH, healthy
from support.imports import modules_after

from jupyter_gpu.doctor import evaluate

# -- rendering ------------------------------------------------------------------------------------


def test_text_html_and_json_forms():
    facts = healthy()
    facts.torch = CPU_TORCH
    facts.env["PYTORCH_CUDA_ALLOC_CONF"] = "<script>"
    report = evaluate(facts)
    text = str(report)
    assert text.splitlines()[0] == report.verdict
    assert "[FAIL] torch CUDA build: torch 2.13.0+cpu is a CPU-only build" in text
    assert "       fix: Install a CUDA build: `pip install" in text
    html = report.as_report().html()
    assert "<table>" in html and "FAIL" in html and "<script>" not in html
    data = json.loads(report.to_json())
    assert data["verdict"] == report.verdict and data["cuda_ready"] is False and data["primary"] == "build"
    assert {"id": "build", "status": "fail"}.items() <= data["checks"][2].items()
    assert data["facts"]["torch"]["version"] == "2.13.0+cpu"


# -- the magic ------------------------------------------------------------------------------------


@pytest.fixture
def ip():
    from IPython.testing.globalipapp import get_ipython

    from jupyter_gpu.kernel import doctor_magic

    shell = get_ipython()
    undo = doctor_magic.register(shell)
    yield shell
    undo()


def test_magic_prints_json_and_text(ip, capsys, monkeypatch):
    from jupyter_gpu.kernel import doctor_magic

    facts = healthy()
    facts.torch = CPU_TORCH
    seen = {}

    def fake_diagnose(**kwargs):
        seen.update(kwargs)
        return evaluate(facts)

    monkeypatch.setattr(doctor_magic, "diagnose", fake_diagnose)
    ip.run_line_magic("gpu_doctor", "--json --no-server")
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"].startswith("No GPU: torch 2.13.0+cpu is a CPU-only build")
    assert seen == {"check_server": False, "dataloader": None}
    ip.run_line_magic("gpu_doctor", "")
    out = capsys.readouterr().out
    assert out.startswith("No GPU: torch 2.13.0+cpu") and "[FAIL]" in out


def test_unregister_removes_the_magic():
    from IPython.testing.globalipapp import get_ipython

    from jupyter_gpu.kernel import doctor_magic

    shell = get_ipython()
    undo = doctor_magic.register(shell)
    assert "gpu_doctor" in shell.magics_manager.magics["line"]
    undo()
    assert "gpu_doctor" not in shell.magics_manager.magics["line"]
    assert "DoctorMagics" not in shell.magics_manager.registry


def test_importing_the_doctor_imports_neither_torch_nor_ipython_nor_pynvml():
    assert modules_after("import jupyter_gpu.doctor", ("torch", "IPython", "pynvml")) == []
