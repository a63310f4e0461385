"""The profile analysis (jupyter_gpu.analysis.profile) over recorded and synthetic traces.

Synthetic GPU traces follow the Chrome trace torch.profiler exports with CUDA activities
(kineto's categories: cpu_op, cuda_runtime, kernel, gpu_memcpy; kernels linked to their launch
by ``correlation``): each test plants one problem and checks that its hint names it, and that a
clean bf16 loop gets none.
"""

from __future__ import annotations

import json
import re

import pytest
from support.profile_traces import BF16, Trace, tiny_ops_loop

from jupyter_gpu.analysis.profile import analyse
from jupyter_gpu.analysis.profile_hints import Facts
from jupyter_gpu.analysis.profile_trace import CELL_MARK
from jupyter_gpu.analysis.units import format_us


def titles(trace: dict, facts: Facts | None = None) -> list[str]:
    return [h.title for h in analyse(trace, facts or Facts()).hints]


def clean_bf16_loop() -> dict:
    """200 steps of large bf16 matmuls queued far ahead of the GPU: busy, no syncs, no copies."""
    t = Trace()
    ts = 0.0
    for _ in range(200):
        ts = t.matmul(ts, kernel_us=400.0)
    return t.trace(0.0, t.gpu_free)


def test_a_clean_bf16_loop_gets_no_hint():
    profile = analyse(clean_bf16_loop())
    assert profile.hints == []
    assert profile.busy_share > 0.99
    assert profile.kernels[0].calls == 200 and profile.kernels[0].mean_us == pytest.approx(400.0)
    assert profile.ops[0].name == "aten::mm" and profile.ops[0].device_us == pytest.approx(200 * 400.0)
    text = str(profile)
    assert "[  OK] no problem found" in text and "GPU busy" in text


def test_a_loop_of_tiny_ops_is_launch_bound():
    hints = analyse(tiny_ops_loop()).hints
    assert [h.title for h in hints] == ["many tiny kernels: launch-bound"]
    assert "2,000 kernels, median 2.00 µs" in hints[0].evidence
    assert "CUDA graph" in hints[0].fix and "torch.compile" in hints[0].fix


def test_fp32_matmuls_on_tensor_core_gpu_name_amp_and_tf32():
    t = Trace()
    ts = 0.0
    for _ in range(50):
        ts = t.matmul(ts, 400.0, dtype="float")
    trace = t.trace(0.0, t.gpu_free)
    hint = analyse(trace).hints[0]
    assert hint.title == "fp32 matmuls and convolutions: Tensor Cores unused"
    assert "aten::mm in fp32" in hint.evidence and "100% of GPU time" in hint.evidence
    assert "%%amp" in hint.fix and "set_float32_matmul_precision" in hint.fix
    assert titles(trace, Facts(tf32_matmul=True)) == []  # TF32 runs them on Tensor Cores


def test_autocast_counts_the_inner_bf16_matmul_not_the_fp32_call_around_it():
    t = Trace()
    ts = 0.0
    for _ in range(50):
        t.op("aten::mm", ts, 20.0, ["float", "float"], [[4096, 4096], [4096, 4096]])
        t.op("aten::_to_copy", ts + 1.0, 2.0, ["float"], [[4096, 4096]])
        t.matmul(ts + 4.0, 400.0)
        ts += 20.0
    assert titles(t.trace(0.0, t.gpu_free)) == []


def test_without_shapes_the_dtype_checks_ask_for_record_shapes():
    t = Trace(record_shapes=False)
    ts = 0.0
    for _ in range(50):
        ts = t.matmul(ts, 400.0, dtype="float")
    profile = analyse(t.trace(0.0, t.gpu_free))
    assert profile.hints == []
    assert any("`--record-shapes`" in note for note in profile.notes)


def test_matmul_dims_not_multiples_of_8_are_named():
    t = Trace()
    ts = 0.0
    for _ in range(50):
        ts = t.matmul(ts, 400.0, dims=(4096, 4096, 50257))
    hint = analyse(t.trace(0.0, t.gpu_free)).hints[0]
    assert hint.title.startswith("matmul dimensions not multiples of 8")
    assert "aten::mm [4096, 4096] × [4096, 50257] (50257)" in hint.evidence


def test_pageable_copies_are_named_with_their_size():
    t = Trace()
    ts = 0.0
    for _ in range(20):
        t.op("aten::copy_", ts, 50.0, ["float", "float"], [[1 << 22], [1 << 22]])
        t.launch(ts + 2.0, "Memcpy HtoD (Pageable -> Device)", 1300.0, cat="gpu_memcpy", bytes=16 << 20)
        ts = t.matmul(ts + 50.0, 400.0)
    hints = analyse(t.trace(0.0, t.gpu_free)).hints
    assert [h.title for h in hints] == ["host-to-device copies from pageable memory"]
    assert "20 copies of 320 MiB" in hints[0].evidence and "pin_memory=True" in hints[0].fix


def test_pinned_copies_are_fine():
    t = Trace()
    ts = 0.0
    for _ in range(20):
        t.launch(ts, "Memcpy HtoD (Pinned -> Device)", 300.0, cat="gpu_memcpy", bytes=16 << 20)
        ts = t.matmul(ts + 10.0, 400.0)
    assert titles(t.trace(0.0, t.gpu_free)) == []


def test_item_in_the_loop_is_counted_as_host_syncs():
    t = Trace()
    ts = 0.0
    for _ in range(30):
        ts = t.matmul(ts, 400.0)
        t.op("aten::item", ts, 0.0, [BF16], [[]])  # duration set below, once the sync ends
        item = t.events[-1]
        end = t.sync(ts + 2.0)
        item["dur"] = end - ts + 1.0
        ts = end + 1.0
    hints = analyse(t.trace(0.0, ts)).hints
    sync = next(h for h in hints if h.title == "host syncs inside the loop")
    assert "waited for the GPU 30 times: 30× `.item()`" in sync.evidence


def test_the_magics_own_sync_after_the_cell_is_not_counted():
    t = Trace()
    ts = 0.0
    for _ in range(20):
        ts = t.matmul(ts, 400.0)
    for i in range(12):  # after the cell's end (the magic's torch.cuda.synchronize)
        t.sync(ts + 10.0 + i, "cudaDeviceSynchronize")
    trace = t.trace(0.0, ts)
    assert "host syncs inside the loop" not in titles(trace)


def test_a_sleeping_dataloader_is_named_as_the_input_pipeline():
    t = Trace()
    ts = 0.0
    for _ in range(10):
        t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", ts, 20_000.0)
        ts = t.matmul(ts + 20_000.0, 1000.0)
    hints = analyse(t.trace(0.0, t.gpu_free)).hints
    assert [h.title for h in hints] == ["GPU idle most of the time while the CPU works: input pipeline"]
    assert "in the DataLoader fetching batches" in hints[0].evidence
    assert "num_workers" in hints[0].fix and "pin_memory" in hints[0].fix
    gaps = analyse(t.trace(0.0, t.gpu_free)).gaps
    assert gaps[0].during.startswith("enumerate(DataLoader)") and gaps[0].dur_us > 19_000


def test_unfused_attention_and_the_math_fallback():
    t = Trace()
    ts = 0.0
    for _ in range(12):
        for name in ("aten::bmm", "aten::_softmax", "aten::bmm"):
            t.op(name, ts, 8.0, [BF16], [[8, 128, 128]])
            t.launch(ts + 2.0, name.removeprefix("aten::") + "_kernel", 300.0)
            ts += 8.0
    assert "attention written out as matmul + softmax" in titles(t.trace(0.0, t.gpu_free))
    t = Trace()
    t.op("aten::scaled_dot_product_attention", 0.0, 30.0, ["float", "float", "float"], [[8, 8, 128, 64]] * 3)
    t.op("aten::_scaled_dot_product_attention_math", 1.0, 28.0, ["float"], [[8, 8, 128, 64]])
    t.launch(2.0, "softmax_kernel", 20_000.0)
    hint = next(h for h in analyse(t.trace(0.0, t.gpu_free)).hints if "attention" in h.title)
    assert hint.title == "attention on the unfused math kernel" and "sdpa_kernel" in hint.fix


def conv_loop(shapes: list[list[int]]) -> dict:
    t = Trace()
    ts = 0.0
    for shape in shapes:
        t.op("aten::convolution", ts, 10.0, [BF16, BF16], [shape, [64, 3, 3, 3]])
        t.launch(ts + 2.0, "cudnn::implicit_gemm", 800.0)
        ts += 10.0
    return t.trace(0.0, t.gpu_free)


def test_cudnn_benchmark_off_for_fixed_shape_convolutions():
    trace = conv_loop([[64, 3, 32, 32]] * 20)
    hint = analyse(trace).hints[0]
    assert hint.title == "cuDNN benchmark off for fixed-shape convolutions"
    assert "20 convolutions" in hint.evidence and "1 input shapes" in hint.evidence
    assert "torch.backends.cudnn.benchmark = True" in hint.fix
    assert titles(trace, Facts(cudnn_benchmark=True)) == []
    assert titles(conv_loop([[n, 3, 32, 32] for n in range(1, 21)])) == []  # shapes change every step


def test_idle_gaps_say_what_the_cpu_did():
    t = Trace()
    t.matmul(0.0, 100.0)
    t.op("aten::randn", 2_000.0, 30_000.0)
    t.matmul(33_000.0, 100.0)
    profile = analyse(t.trace(0.0, t.gpu_free))
    assert profile.gaps[0].during == "aten::randn" and profile.gaps[0].dur_us == pytest.approx(32_900.0)
    assert "idle gap" in str(profile) and "during aten::randn" in str(profile)


def test_memory_peak_and_largest_allocations_come_from_memory_events():
    t = Trace(profile_memory=True)
    t.op("aten::empty", 0.0, 10.0)
    for ts, size, total in ((1.0, 1 << 30, 1 << 30), (20.0, 2 << 30, 3 << 30), (30.0, -(1 << 30), 2 << 30)):
        t.events.append(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "args": {"Bytes": size, "Total Allocated": total, "Device Type": 1, "Device Id": 0},
            }
        )
    profile = analyse(t.trace(0.0, 40.0), sort="memory")
    assert profile.peaks == {"cuda:0": 3 << 30}
    assert [(a.bytes, a.op) for a in profile.allocations] == [
        (2 << 30, "outside any operator"),
        (1 << 30, "aten::empty"),
    ]
    text = str(profile)
    assert re.search(r"peak allocated on cuda:0 +3.00 GiB", text)
    assert "allocation in aten::empty" in text


def test_a_recorded_cpu_trace(tmp_path):
    """A real CPU profile from torch: operators by CPU time, no GPU figures and no hints."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function(CELL_MARK):
            x = torch.ones(32, 32)
            for _ in range(7):
                x = torch.mm(x, x) / 32
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    result = analyse(json.loads((tmp_path / "trace.json").read_text()))
    assert result.gpu is None and result.hints == [] and result.sort == "cpu"
    mm = next(s for s in result.ops if s.name == "aten::mm")
    assert mm.calls == 7 and mm.device_us == 0
    text = str(result)
    assert text.startswith("gpu_profile: CPU only") and "  GPU busy" not in text
    assert "top operators by CPU time" in text and "7 calls" in text


def test_report_html_escapes_and_marks_hints():
    t = Trace()
    ts = 0.0
    for _ in range(50):
        ts = t.matmul(ts, 400.0, dtype="float")
    html = analyse(t.trace(0.0, t.gpu_free)).as_report().html()
    assert "WARN" in html and "<code>%%amp</code>" in html and "<table>" in html


@pytest.mark.parametrize(
    ("us", "text"), [(3.2, "3.20 µs"), (999.0, "999 µs"), (41_000.0, "41.0 ms"), (1.5e6, "1.50 s")]
)
def test_durations(us, text):
    assert format_us(us) == text
