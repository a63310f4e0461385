"""The one text+HTML report: what a notebook shows for the doctor, the warm-up and %gpu_mem."""

from __future__ import annotations

from jupyter_gpu.report import Report, Row, Section


def test_backticked_commands_are_code_in_html_and_kept_in_text() -> None:
    fix = "Install a CUDA build: `pip install torch --index-url https://x/cu130` <then> restart."
    report = Report(
        [
            Section(
                "Checks",
                rows=[Row("torch", note="CPU-only `torch`", status="fail", fix=fix)],
                notes=["set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`"],
            )
        ],
        heading="No GPU: `nvidia-smi` fails",
    )
    html = report.html()
    assert "<code>pip install torch --index-url https://x/cu130</code>" in html
    assert "<code>PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True</code>" in html
    assert "<code>nvidia-smi</code>" in html and "<code>torch</code>" in html
    assert "`" not in html and "&lt;then&gt;" in html  # no literal backticks, and still escaped
    assert "`pip install torch --index-url https://x/cu130`" in report.text()
